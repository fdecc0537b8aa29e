// Package sfubench is `ebrtc bench --sfu`: SFUs on the namespace testbed,
// ebrtc sfu's data planes (eBPF and user space, plain and encrypted) and
// Janus's VideoRoom, each on its own core: its cost per replica saturated,
// its loss-free replicas/s, the replicas' skew, and how many participants
// of 10-party meetings it carries (the ramp); and a large room with and
// without last-N.
package sfubench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// SFU is one SFU under test, started in the server namespace with its
// media on the client side: ebrtc sfu with one data plane or the other, or
// Janus's VideoRoom (plane "").
type SFU struct {
	Name     string
	Describe string
	plane    string // ebrtc sfu --dataplane
	// adapted: every other receiver reports a narrow link (REMB), so its
	// video is cut to the lowest temporal layer and renumbered.
	adapted bool
	// plain: the publisher negotiates neither NACKs nor transport-wide
	// numbers, so the SFU writes no history and numbers no replicas; by
	// default receivers negotiate transport-cc, as browsers do (adapted
	// ones excepted: their estimate is their REMB).
	plain bool
	// encrypted: DTLS-SRTP on every connection (ebrtc sfu's default and
	// Janus's), the participants sealing what they send and opening what
	// they receive; the in-kernel generator cannot seal, so the saturated
	// figures come from the paced sender's trial with loss that
	// replicated the most.
	encrypted bool
	rx        string // ebrtc sfu --rx ("": kernel)
	lastN     int    // ebrtc sfu --last-n (0: every speaker's video)
}

func (s SFU) janus() bool { return s.plane == "" }

// SFUs returns every SFU kind, in report order.
func SFUs() []SFU {
	return []SFU{
		{Name: "ebrtc-sfu-ebpf", Describe: "ebrtc sfu --dataplane ebpf: TC ingress, bpf_clone_redirect per replica; history written, transport-wide number per replica",
			plane: "ebpf"},
		{Name: "ebrtc-sfu-user", Describe: "ebrtc sfu --dataplane user: recvmmsg, sendmmsg per socket run; history written, transport-wide number per replica",
			plane: "user"},
		{Name: "ebrtc-sfu-ebpf-plain", Describe: "ebrtc sfu --dataplane ebpf, a publisher without NACKs and transport-cc: no history, no transport-wide numbers",
			plane: "ebpf", plain: true},
		{Name: "ebrtc-sfu-user-plain", Describe: "ebrtc sfu --dataplane user, a publisher without NACKs and transport-cc: no history, no transport-wide numbers",
			plane: "user", plain: true},
		{Name: "ebrtc-sfu-ebpf-ra", Describe: "ebrtc sfu --dataplane ebpf, every other receiver adapted to the lowest temporal layer (REMB 160 kbit/s)",
			plane: "ebpf", adapted: true},
		{Name: "ebrtc-sfu-user-ra", Describe: "ebrtc sfu --dataplane user, every other receiver adapted to the lowest temporal layer (REMB 160 kbit/s)",
			plane: "user", adapted: true},
		{Name: "janus", Describe: "Janus 1.1.2 VideoRoom (Debian), no_webrtc_encryption, ICE-lite, a thread per handle"},
		{Name: "ebrtc-sfu-user-encrypted", Describe: "ebrtc sfu as it starts by default: DTLS-SRTP, the user data plane opening once and sealing per replica (AES-128-GCM)",
			plane: "user", encrypted: true},
		{Name: "ebrtc-sfu-afxdp-encrypted", Describe: "ebrtc sfu's defaults with --rx afxdp: AF_XDP batch receive, replicas sealed and sent by the TX ring",
			plane: "user", rx: "afxdp", encrypted: true},
		{Name: "janus-encrypted", Describe: "Janus 1.1.2 VideoRoom (Debian) with its DTLS-SRTP on (its default), ICE-lite, a thread per handle",
			encrypted: true},
	}
}

// Options of an SFU run.
type Options struct {
	SFUs   []string // names from SFUs(); empty: all
	Fanout int      // receivers of the replication trials' one sender
	Trial  time.Duration
	// SaturationTrial is the in-kernel generator's trial (the core's
	// busy share settles over about 2 s; 0: the longer of Trial and 2 s).
	SaturationTrial time.Duration
	MaxLoss         float64
	// The loss-free search's input rates (RTP packets/s into the SFU).
	StartRate, MaxRate float64
	Steps              int
	// The ramp: meetings of MeetingSize participants, one more every
	// RampStep, up to RampMax participants.
	MeetingSize int
	RampStep    time.Duration
	RampMax     int
	// MeetingPace is the participants' pace, of the captured stream's
	// (0: 1).
	MeetingPace float64
	// RampJitter and RampLoss end the ramp (the paper's: p99 jitter over
	// 30 ms, loss over 0.1%).
	RampJitter time.Duration
	RampLoss   float64
	// Hosts the receivers spread over: client namespaces, each behind a
	// veth of its own. One veth's ring (256 frames) and NAPI thread would
	// otherwise take every replica, and its overflow, not the SFU, would
	// end the trials (both ebrtc planes' ramps ended at 130 participants
	// with one host, at under a quarter of the eBPF core).
	Hosts int
	// Room, if set, is a meeting of this many participants, everyone
	// publishing, measured with every video and with LastN for RoomTrial
	// (RoomResult; "room" in SFUs).
	Room      int
	LastN     int
	RoomTrial time.Duration
	Isolate   bool
	Progress  io.Writer
	Log       io.Writer
}

// QuickOptions finish in about a minute for both SFUs.
func QuickOptions() Options {
	return Options{Fanout: 50, Trial: time.Second, MaxLoss: 0.001, StartRate: 1000, MaxRate: 200000, Steps: 7,
		MeetingSize: 10, RampStep: 2 * time.Second, RampMax: 400, RampJitter: 30 * time.Millisecond, RampLoss: 0.001, Hosts: 4,
		Room: 50, LastN: 4, RoomTrial: 3 * time.Second}
}

func (o Options) saturationTrial() time.Duration {
	if o.SaturationTrial > 0 {
		return o.SaturationTrial
	}
	return max(o.Trial, 2*time.Second)
}

// FullOptions take longer trials and a longer ramp.
func FullOptions() Options {
	o := QuickOptions()
	o.Trial, o.Steps, o.RampStep, o.RampMax, o.RoomTrial = 3*time.Second, 9, 5*time.Second, 800, 10*time.Second
	return o
}

// Run measures the selected SFUs with bin as the ebrtc binary.
func Run(ctx context.Context, bin string, o Options) (*Report, error) {
	room, names := roomSelected(o.SFUs)
	room = room && o.Room > 0
	var sfus []SFU
	var err error
	if onlyRoom := len(o.SFUs) > 0 && len(names) == 0; !onlyRoom {
		sfus, err = selectSFUs(names)
	}
	if err != nil {
		return nil, err
	}
	rec, err := synth.Chromium()
	if err != nil {
		return nil, err
	}
	e := &env{}
	// The hosts first: the relay core pins their interfaces' NAPI threads too.
	_, closeEnv, err := bench.NewEnv(ctx, bin, o.Log, o.Isolate, func(be *bench.Env) error {
		e.Env = be
		return addHosts(e, o.Hosts)
	})
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	rep := &Report{Machine: bench.MachineFacts(), Started: time.Now(), Isolated: o.Isolate, Fanout: o.Fanout, Hosts: len(e.hosts), Options: o}
	for _, s := range sfus {
		res, err := measureSFU(e, s, rec, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		rep.SFUs = append(rep.SFUs, *res)
	}
	if room {
		if rep.Rooms, err = roomTrials(e, rec, o); err != nil {
			return nil, err
		}
	}
	rep.Elapsed = time.Since(rep.Started)
	rep.compare()
	return rep, nil
}

// env is a run's environment, and the receivers' hosts: the namespaces
// participants live in (the client first) and the server's interfaces
// toward them.
type env struct {
	*bench.Env
	hosts     []*netns.NS
	hostIPs   []netip.Addr
	sfuIfaces []string
}

// hostIP is the address of host (an index into e.hosts, wrapped).
func (e *env) hostIP(host int) netip.Addr { return e.hostIPs[host%len(e.hostIPs)] }

// addHosts puts the receivers' client namespaces on the testbed, the
// first being its client, with TSO off on the server's end of each.
func addHosts(e *env, hosts int) error {
	e.hosts, e.hostIPs, e.sfuIfaces = []*netns.NS{e.Testbed.Client}, []netip.Addr{testbed.ClientIP4}, []string{testbed.ServerCliIface}
	for n := 2; n <= hosts; n++ {
		ns, ip, iface, err := e.Testbed.AddClient(n)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		e.hosts, e.hostIPs, e.sfuIfaces = append(e.hosts, ns), append(e.hostIPs, ip), append(e.sfuIfaces, iface)
	}
	for _, iface := range e.sfuIfaces {
		// A veth with TSO on hands the replicas eBPF clones (no local
		// socket behind them) to netif_rx: the far end's receive work
		// would run on the SFU's core, behind a 1,000-packet backlog. With
		// TSO off they go to the far end's NAPI ring, as the user-space
		// SFU's datagrams do.
		if out, err := e.Testbed.Server.Output("ethtool", "-K", iface, "tso", "off"); err != nil {
			return fmt.Errorf("tso off on %s: %v %s", iface, err, out)
		}
	}
	return nil
}

func selectSFUs(names []string) ([]SFU, error) {
	return bench.Select("SFU", SFUs(), names, func(s SFU) string { return s.Name },
		func(name, asked string) bool { return name == asked }, "ebrtc-sfu-ebpf, ebrtc-sfu-user, ebrtc-sfu-ebpf-plain, ebrtc-sfu-user-plain, ebrtc-sfu-ebpf-ra, ebrtc-sfu-user-ra, janus")
}

// progress writes a progress line; the SFU bench's start with the SFU's
// name, without bench.Progressf's prefix.
func progress(o Options, format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

func measureSFU(e *env, s SFU, rec *synth.Recording, o Options) (*SFUResult, error) {
	progress(o, "%-15s starting", s.Name)
	sut, err := startPinnedSFU(e, s)
	if err != nil {
		return nil, err
	}
	defer sut.stop()
	res := &SFUResult{Name: s.Name, Describe: s.Describe}
	if err := replicationTrials(e, rec, o, res, sut); err != nil {
		return nil, err
	}
	sut.logOutcomes(e, "after the replication trials")
	if err := e.Ctx.Err(); err != nil {
		return nil, err
	}
	if err := ramp(e, rec, o, res, sut); err != nil {
		return nil, err
	}
	sut.logOutcomes(e, "after the ramp")
	progress(o, "%-15s done: %.0f ns/replica saturated (%.0f replicas/s), %.0f replicas/s loss-free, skew p50 %.0f µs p99 %.0f µs, %d participants/core (%s)",
		s.Name, res.RelayCoreNsPerReplica, res.SaturatedReplicasPPS, res.OneCoreMaxLossFreeReplicasPPS, res.SkewP50us, res.SkewP99us,
		res.ParticipantsPerCore, res.RampEnded)
	return res, nil
}

// startPinnedSFU starts s and, isolated, pins it and its interfaces'
// NAPI threads on the relay core.
func startPinnedSFU(e *env, s SFU) (*sfuUnderTest, error) {
	sut, err := startSFU(e, s)
	if err != nil {
		return nil, err
	}
	if err := e.PinRelay(sut.pid); err != nil {
		sut.stop()
		return nil, err
	}
	return sut, nil
}
