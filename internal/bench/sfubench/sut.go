package sfubench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// sfuUnderTest is a running SFU: its process, how synthetic participants
// join it, and what it sent.
type sfuUnderTest struct {
	name      string
	adapted   bool // SFU.adapted
	plain     bool // SFU.plain
	encrypted bool // SFU.encrypted
	pid       int
	stop      func()
	join      synth.Config // without Net and Room
	metrics   func() (testbed.Metrics, error)
	// sentReplicas is what the SFU itself sent (the far end's veth may
	// drop some of it): ebrtc sfu's own counter, or for Janus every UDP
	// datagram sent in the server namespace (RTCP too, a few per second
	// and receiver).
	sentReplicas func() (uint64, error)
	// replicaLength is what the sink counts a replica of a datagram of n
	// bytes by: Janus rewrites header extensions, so 0xffff (any length
	// counts one).
	replicaLength func(n int) uint16
}

// layersDropped is how many replicas the SFU left out on purpose (rate
// adaptation): layers dropped, and what a receiver whose video resumed
// was held from while it waits for a key frame (the trials' template is
// none); 0 for an SFU that does not say.
func (sut *sfuUnderTest) layersDropped() (uint64, error) {
	if sut.metrics == nil || !sut.adapted {
		return 0, nil
	}
	m, err := sut.metrics()
	return uint64(m.SFUOutcome(dataplane.LayerDropped.String()) + m.SFUOutcome(dataplane.Gated.String())), err
}

// adaptedEstimate is what an adapted receiver reports: 90% of it (the
// link's headroom) carries the captured stream's lowest temporal layer
// and its audio (71 and 51 kbit/s on the wire) but not the next layer
// (127 kbit/s with its base), so it gets only the lowest, renumbered
// (under 100 kbit/s, where issue 11 had it, its video would pause).
const adaptedEstimate = 160e3

func startSFU(e *env, s SFU) (*sfuUnderTest, error) {
	if s.janus() {
		dir, err := os.MkdirTemp(e.WorkDir, "janus-")
		if err != nil {
			return nil, err
		}
		p, err := e.Testbed.StartJanus(dir, e.Log, s.encrypted)
		if err != nil {
			return nil, err
		}
		return &sfuUnderTest{name: s.Name, pid: p.Pid(), encrypted: s.encrypted,
			stop:          func() { _ = p.Stop(5 * time.Second) },
			join:          synth.Config{Server: testbed.JanusAPI.String(), Janus: true},
			sentReplicas:  func() (uint64, error) { return bench.UDPCounter(e.Testbed.Server, "OutDatagrams") },
			replicaLength: func(int) uint16 { return 0xffff }}, nil
	}
	args := testbed.SFUArgs(s.plane)
	overhead := 0
	if s.encrypted {
		args, overhead = testbed.EncryptedSFUArgs(s.plane), srtpGCMTag
	}
	if s.rx != "" {
		args = append(args, "--rx", s.rx)
	}
	if s.lastN > 0 {
		args = append(args, "--last-n", strconv.Itoa(s.lastN))
	}
	switch {
	case s.plane == "ebpf":
		for _, iface := range e.sfuIfaces[1:] { // SFUArgs name the first
			args = append(args, "--iface", iface)
		}
	case s.rx == "afxdp": // AF_XDP sockets on every host's veth: receive and send
		for _, iface := range e.sfuIfaces {
			args = append(args, "--iface", iface)
		}
	default: // one worker: the SFU gets one core (pinned once it runs, so it sees the machine's)
		args = append(args, "--workers", "1")
	}
	r, err := e.Testbed.StartRelay(e.Bin, args...)
	if err != nil {
		return nil, err
	}
	return &sfuUnderTest{name: s.Name, pid: r.Pid(), adapted: s.adapted, plain: s.plain, encrypted: s.encrypted,
		stop:    func() { _ = r.Stop(5 * time.Second) },
		join:    synth.Config{Server: testbed.SFUWeb.String()},
		metrics: r.Metrics,
		sentReplicas: func() (uint64, error) {
			m, err := r.Metrics()
			return uint64(m.SFUOutcome(dataplane.Replica.String())), err
		},
		replicaLength: func(n int) uint16 { return uint16(n + overhead) }}, nil
}

// srtpMaxOverhead is the most SRTP adds to an RTP packet (a GCM tag).
const srtpMaxOverhead = srtpGCMTag

// srtpGCMTag is what SRTP with AEAD_AES_128_GCM (what ebrtc sfu prefers
// and the participants offer first) adds to an RTP packet.
const srtpGCMTag = 16

// outcomes is ebrtc sfu's data plane outcomes (nil for another SFU).
func (sut *sfuUnderTest) outcomes() map[string]float64 {
	if sut.metrics == nil {
		return nil
	}
	m, err := sut.metrics()
	if err != nil {
		return nil
	}
	return sfuOutcomes(m)
}

// outcomesSince is what changed between two outcome snapshots.
func outcomesSince(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			d[k] = n
		}
	}
	return d
}

// logOutcomes logs ebrtc sfu's data plane outcomes.
func (sut *sfuUnderTest) logOutcomes(e *env, when string) {
	if sut.metrics == nil {
		return
	}
	if m, err := sut.metrics(); err == nil {
		fmt.Fprintf(e.Log, "%s outcomes %s: %v\n", sut.name, when, sfuOutcomes(m))
	}
}

// config is how a participant on host (an index into e.hosts, wrapped)
// joins room.
func (sut *sfuUnderTest) config(e *env, host int, room string) synth.Config {
	c := sut.join
	c.Net, c.Room = synth.NetIn(e.hosts[host%len(e.hosts)]), room
	if !c.Janus {
		c.Token = testbed.SFUTokens(room)
	}
	if sut.adapted && host%2 == 1 {
		c.Estimate = adaptedEstimate
	}
	c.Plain, c.TWCC = sut.plain, !c.Janus && !sut.plain && !sut.adapted
	c.Encrypted = sut.encrypted
	return c
}

// meeting is synthetic participants in one room.
type meeting struct {
	parts []*synth.Participant
}

func (m *meeting) leave() {
	var wg sync.WaitGroup
	for _, p := range m.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Leave()
		}()
	}
	wg.Wait()
}

// sfuOutcomes are the SFU's non-zero data plane outcomes, for the log.
func sfuOutcomes(m testbed.Metrics) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "ebrtc_sfu_datagrams_total{") && v > 0 {
			out[strings.TrimSuffix(strings.TrimPrefix(k, `ebrtc_sfu_datagrams_total{outcome="`), `"}`)] = v
		}
	}
	return out
}
