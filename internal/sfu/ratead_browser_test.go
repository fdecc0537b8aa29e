package sfu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The meeting harness of the shaped-receiver tests (shaped_browser_test.go):
// three Chromium participants, each publishing audio and video (AV1, VP8
// or VP9 at L1T3, 320x180) and receiving the others: P1 and P2 from the
// testbed's client namespace, P3 from a namespace of its own behind its
// own veth (testbed.AddClient), so that its downlink alone can be shaped
// (testbed.Shape on the server's end: what the data plane bpf_redirects
// goes through that qdisc) or made lossy (testbed.DropRandom in P3's
// namespace: bpf_redirect bypasses the server namespace's netfilter).

// senderMaxKbps caps P1's and P2's video (the page's maxKbps): their
// rates, and so their layers', stay put while P3's link is shaped.
const senderMaxKbps = 250

// rateInterval is how often participants.mjs samples the pages' stats.
const rateInterval = time.Second

// rateBed is ebrtc sfu with the eBPF data plane on the testbed (set up as a
// container host has it), attached to the client's veth and to P3's:
// plain RTP (--unencrypted-media) over plain HTTP, whose RTCP the test
// reads on the veths; or, configured so, encrypted media (the user data
// plane) with the page over HTTPS, the RTCP on the veths SRTCP (its
// reports then say less).
// newRateBed's configure, if set, changes the SFU's Config before it starts.
type rateBed struct {
	tb        *testbed.Testbed
	plane     dataplane.Plane
	p3        *netns.NS  // P3's namespace
	p3Addr    netip.Addr // P3's address there
	p3Link    string     // the server's end of P3's veth
	senders   *testbed.Participants
	ids       [3]string           // P1's, P2's and P3's, once every one decodes every other
	admin     string              // the SFU's admin endpoint
	acks      *ratecontrol.AckLog // EBRTC_SFU_ACK_LOG's, nil without
	scheme    string              // the page's: http, or https with encrypted media
	p1Query   string              // more of P1's page's query (&simulcast=2...)
	p1Browser string              // P1's browser: chromium (""), or firefox
}

// p1BrowserKind is P1's page's browser as participants.mjs takes it. A
// Chromium P1 whose camera size is its own (p1Query's video=) runs in a
// Chromium of its own: the pages of one Chromium share its fake camera,
// at the size the first page to open it asked for, and P2's asks for the
// page's default (a simulcast P1 came out 320 wide in about 1 case in 8,
// its top encoding unsent).
func (b *rateBed) p1BrowserKind() string {
	if (b.p1Browser == "" || b.p1Browser == "chromium") && strings.Contains(b.p1Query, "video=") {
		return "chromium-apart"
	}
	return b.p1Browser
}

// p1Latest is P1's newest sample (zero before the first).
func (b *rateBed) p1Latest() testbed.PageSample {
	s := b.senders.Snapshot()
	if len(s) == 0 || len(s[len(s)-1].Pages) == 0 {
		return testbed.PageSample{}
	}
	return s[len(s)-1].Pages[0]
}

// setMode switches P1's (page 0) or P2's (page 1) video encoder to a
// scalability mode, as an app would (setParameters).
func (b *rateBed) setMode(page int, mode string) {
	b.senders.Command(fmt.Sprintf("mode %d %s", page, mode))
}

// decisionLog is the SFU's log for a rate test: everything at debug
// level to EBRTC_SFU_DEBUG_LOG, for a run looked into; and its decisions
// (layer switches, allocations, estimates, probes) and what it logs at
// info or above kept, up to decisionLogMax, and printed if the test
// fails (CI keeps nothing else of a run).
func decisionLog(t *testing.T) *slog.Logger {
	buf := &lockedBuffer{max: decisionLogMax}
	var full slog.Handler
	if path := os.Getenv("EBRTC_SFU_DEBUG_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		full = slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the SFU's decisions:\n%s", buf.String())
		}
	})
	return slog.New(decisionHandler{kept: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}), full: full})
}

// decisionLogMax bounds what a failed test prints of the decision log.
const decisionLogMax = 256 << 10

// decisionHandler passes the SFU's decisions and its info and above to
// kept, everything to full (if set).
type decisionHandler struct{ kept, full slog.Handler }

var decisionMessages = map[string]bool{"layer switch": true, "link allocation": true, "link estimate": true, "probe": true, "probe judged": true}

func (h decisionHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h decisionHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.full != nil {
		_ = h.full.Handle(ctx, r)
	}
	if r.Level >= slog.LevelInfo || decisionMessages[r.Message] {
		return h.kept.Handle(ctx, r)
	}
	return nil
}

func (h decisionHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := decisionHandler{kept: h.kept.WithAttrs(as)}
	if h.full != nil {
		out.full = h.full.WithAttrs(as)
	}
	return out
}

func (h decisionHandler) WithGroup(name string) slog.Handler {
	out := decisionHandler{kept: h.kept.WithGroup(name)}
	if h.full != nil {
		out.full = h.full.WithGroup(name)
	}
	return out
}

// lockedBuffer is a bytes.Buffer for concurrent writers, keeping at most
// max bytes (what comes after is dropped, and said to be).
type lockedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len()+len(p) > b.max {
		b.truncated = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.truncated {
		return b.buf.String() + "(the rest dropped)\n"
	}
	return b.buf.String()
}

func newRateBed(t *testing.T, configure func(*Config)) *rateBed {
	testenv.RequireRoot(t)
	for _, c := range []string{"tc", "nft"} { // (the browsers' own: testbed.BrowserScript)
		testenv.RequireCommand(t, c)
	}
	tb, err := testbed.NewWith(testbed.Options{Unprepared: true})
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	b := &rateBed{tb: tb, admin: "unix:" + filepath.Join(t.TempDir(), "sfu.sock")}
	// P3 reaches the SFU's media socket (10.201.1.1) through its own veth:
	// the address is the server namespace's own, whichever interface a
	// datagram comes in on, and the route back to P3 leaves by that veth.
	if b.p3, b.p3Addr, b.p3Link, err = tb.AddClient(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dataplane.Plane, 1)
	done := make(chan error, 1)
	cfg := Config{Listen: testbed.SFUWeb.String(), Web: web.TLS{Plain: true}, Dataplane: "ebpf", Unencrypted: true,
		Access:        access.Config{Secret: []byte(testbed.SFUTokenSecret)},
		MetricsListen: testbed.ServerClientIP4.String() + ":9108",
		Media:         []netip.AddrPort{testbed.SFUMedia},
		Ifaces:        []string{testbed.ServerCliIface, b.p3Link}, AdminListen: b.admin,
		Ready: func(_ net.Addr, p dataplane.Plane) { ready <- p }}
	if configure != nil {
		configure(&cfg)
	}
	b.scheme = "http"
	if !cfg.Unencrypted { // encrypted media: the page over HTTPS too
		cfg.Web, b.scheme = web.TLS{Dir: t.TempDir(), Hosts: []string{testbed.SFUWeb.Addr().String()}}, "https"
	}
	if path := os.Getenv("EBRTC_SFU_ACK_LOG"); path != "" { // the acks P3's link took, for a run looked into (and ratecontrol's testdata)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		b.acks = ratecontrol.NewAckLog(f)
		cfg.AckLog = b.acks
	}
	cfg.Log = decisionLog(t)
	go func() { done <- tb.Server.Do(func() error { return Run(ctx, cfg) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sfu: %v", err)
		}
	})
	select {
	case b.plane = <-ready:
	case err := <-done:
		t.Fatalf("sfu: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sfu: not serving after 30 s")
	}
	return b
}

// ratePhase is a stretch of the meeting. Apply, if set, changes the network
// when the phase starts (done: the phases before, measured) and says how;
// its undo runs when the phase ends. Report, if set, says at the end (before
// the undo) what the change did (a qdisc's or a rule's counters).
type ratePhase struct {
	Name     string
	Duration time.Duration
	Apply    func(b *rateBed, done []phaseSeries) (note string, undo func() error, err error)
	Report   func(b *rateBed) string
}

// rateSeries is what a run measured: the participants' ids (P1, P2, P3),
// each phase's samples, the descriptions negotiated, and P3's RTCP.
type rateSeries struct {
	IDs        [3]string
	Phases     []phaseSeries
	Negotiated [3]testbed.Negotiated // P1's, P2's, P3's
	// RTCP is what crossed P3's veth and the client's (P1's and P2's), by
	// direction and type ("P3 ->SFU REMB": packets), over the whole run.
	RTCP map[string]int
	// REMB is every REMB seen on those veths, in time order.
	REMB []rembSample
	// VideoSSRC is P1's and P2's video SSRC (what REMBs about them name).
	VideoSSRC [2]uint32
}

// phaseSeries is one phase of P1, P2 and P3 (the Phase's participants 0,
// 1 and 2), with what Apply and Report said and the REMBs seen during it.
type phaseSeries struct {
	testbed.Phase
	Note   string // what Apply did
	Report string // what Report said
	REMB   []rembSample
}

// REMBFor is the phase's REMBs seen at where (rembSample.Where) about ssrc.
func (ph phaseSeries) REMBFor(where string, ssrc uint32) []rembSample {
	var r []rembSample
	for _, x := range ph.REMB {
		if x.Where == where && slices.Contains(x.SSRCs, ssrc) {
			r = append(r, x)
		}
	}
	return r
}

// rembSummary is how many REMBs there were and their first, lowest,
// highest and last estimate in kbit/s.
func rembSummary(r []rembSample) string {
	if len(r) == 0 {
		return "none"
	}
	lo, hi := rembRange(r)
	return fmt.Sprintf("%d, kbit/s first %.0f min %.0f max %.0f last %.0f", len(r), r[0].Bitrate/1000, lo/1000, hi/1000, r[len(r)-1].Bitrate/1000)
}

// rembSample is one REMB: its estimate for the SSRCs, and where it was
// seen: "P3 ->SFU" (P3 sent it), "P1+P2 ->SFU" (P1 or P2 sent it), "P1+P2
// SFU->" (the SFU forwarded it to P1 or P2).
type rembSample struct {
	Where   string
	T       time.Time
	Bitrate float64
	SSRCs   []uint32
}

// run holds the meeting through the phases: P1 and P2 in the client
// namespace, P3 in its own, each process sampling every rateInterval. It
// waits (up to 30 s) until every participant decodes every sender, applies
// each phase in turn, then stops the browsers and returns what they
// measured.
func (b *rateBed) run(t *testing.T, phases []ratePhase) *rateSeries {
	var total time.Duration
	for _, ph := range phases {
		total += ph.Duration
	}
	const joinWithin = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), total+joinWithin+time.Minute)
	t.Cleanup(cancel)
	room := "rate" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	urls := testbed.SFUPageURLs(fmt.Sprintf("%s://%s/?maxKbps=%d", b.scheme, testbed.SFUWeb, senderMaxKbps), room, 3)
	// One encoding a publisher, but where a test asks P1 for simulcast.
	for i := range urls {
		urls[i] += "&simulcast=1"
	}
	if b.p1Query != "" {
		urls[0] = strings.Replace(urls[0], "&simulcast=1", b.p1Query, 1)
	}
	seconds := int((total + joinWithin + 20*time.Second) / time.Second)

	caps := map[string]*rtcpCapture{
		"P3":    startRTCPCapture(t, ctx, "P3", b.p3, testbed.ClientIface),
		"P1+P2": startRTCPCapture(t, ctx, "P1+P2", b.tb.Client, testbed.ClientIface),
	}
	senders := testbed.StartParticipants(t, ctx, b.tb.Client, urls[0]+" "+urls[1], "send,send", seconds, rateInterval, b.p1BrowserKind()+",chromium")
	receiver := testbed.StartParticipants(t, ctx, b.p3, urls[2], "send", seconds, rateInterval, "chromium")
	b.senders = senders
	// latest is each participant's newest sample (P1, P2, P3).
	latest := func() [3]testbed.PageSample {
		var l [3]testbed.PageSample
		s, r := senders.Snapshot(), receiver.Snapshot()
		if len(s) > 0 && len(s[len(s)-1].Pages) == 2 {
			l[0], l[1] = s[len(s)-1].Pages[0], s[len(s)-1].Pages[1]
		}
		if len(r) > 0 && len(r[len(r)-1].Pages) == 1 {
			l[2] = r[len(r)-1].Pages[0]
		}
		return l
	}
	// Everyone decodes every other.
	decoding := func(l [3]testbed.PageSample) bool {
		if l[0].ID == "" || l[1].ID == "" || l[2].ID == "" {
			return false
		}
		for p := range 3 {
			for q := range 3 {
				if p != q && l[p].Inbound[l[q].ID].Video.FramesDecoded == 0 {
					return false
				}
			}
		}
		return true
	}
	joinStart := time.Now()
	for !decoding(latest()) {
		if time.Since(joinStart) > joinWithin || ctx.Err() != nil {
			testbed.StopParticipants(senders, receiver)
			t.Fatalf("not every participant decodes every sender within %v: %+v\nsenders' log:\n%s\nP3's log:\n%s",
				joinWithin, latest(), senders.Stderr(), receiver.Stderr())
		}
		for _, p := range []*testbed.Participants{senders, receiver} {
			if p.Exited() {
				t.Fatalf("participants.mjs %s ended, %s: %s", p.Roles, p.ExitState(), p.Stderr())
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every participant decodes every sender after %v", time.Since(joinStart).Round(time.Millisecond))
	for p, page := range latest() {
		b.ids[p] = page.ID
	}

	var done []phaseSeries
	var bounds [][2]time.Time
	var notes, reports []string
	for _, ph := range phases {
		start := time.Now()
		note, undo := "", func() error { return nil }
		if ph.Apply != nil {
			// What the phases so far measured, for Apply.
			done = b.series(bounds, notes, reports, phases, senders, receiver, caps).Phases
			n, u, err := ph.Apply(b, done)
			if err != nil {
				t.Fatalf("phase %s: %v", ph.Name, err)
			}
			note, undo = n, u
			t.Cleanup(func() { _ = undo() })
			t.Logf("phase %s: %s", ph.Name, note)
		}
		select {
		case <-time.After(ph.Duration - time.Since(start)):
		case <-ctx.Done():
			t.Fatalf("phase %s: %v", ph.Name, ctx.Err())
		}
		report := ""
		if ph.Report != nil {
			report = ph.Report(b)
		}
		if err := undo(); err != nil {
			t.Errorf("phase %s: %v", ph.Name, err)
		}
		bounds = append(bounds, [2]time.Time{start, time.Now()})
		notes = append(notes, note)
		reports = append(reports, report)
	}
	testbed.StopParticipants(senders, receiver)
	for _, c := range caps {
		c.stop()
	}
	res := b.series(bounds, notes, reports, phases, senders, receiver, caps)
	for i, p := range []*testbed.Participants{senders, senders, receiver} {
		if sum := p.Summary(); sum != nil {
			// The page's index in its process: P1 and P2 are the senders' 0 and 1, P3 the receiver's 0.
			if j := [3]int{0, 1, 0}[i]; j < len(sum.Negotiated) {
				res.Negotiated[i] = sum.Negotiated[j]
			}
		} else {
			t.Errorf("participants.mjs %s printed no summary:\n%s", p.Roles, p.Stderr())
		}
	}
	return res
}

// series cuts what has been sampled so far into the phases that ended
// (bounds: their start and end).
func (b *rateBed) series(bounds [][2]time.Time, notes, reports []string, phases []ratePhase, senders, receiver *testbed.Participants, caps map[string]*rtcpCapture) *rateSeries {
	res := &rateSeries{RTCP: map[string]int{}}
	// Each participant's samples in time order: P1, P2 from the senders' lines, P3 from the receiver's.
	var all [3][]testbed.PageSample
	for _, l := range senders.Snapshot() {
		if len(l.Pages) == 2 {
			for p := range 2 {
				l.Pages[p].T = l.T
				all[p] = append(all[p], l.Pages[p])
			}
		}
	}
	for _, l := range receiver.Snapshot() {
		if len(l.Pages) == 1 {
			l.Pages[0].T = l.T
			all[2] = append(all[2], l.Pages[0])
		}
	}
	for p := range 3 {
		if n := len(all[p]); n > 0 {
			res.IDs[p] = all[p][n-1].ID
		}
	}
	for p := range 2 {
		if n := len(all[p]); n > 0 {
			res.VideoSSRC[p] = uint32(all[p][n-1].Outbound["video"].SSRC)
		}
	}
	remb := append(caps["P3"].rembs(), caps["P1+P2"].rembs()...)
	sort.SliceStable(remb, func(i, j int) bool { return remb[i].T.Before(remb[j].T) })
	res.REMB = remb
	for i, bd := range bounds {
		ph := phaseSeries{Phase: testbed.NewPhase(phases[i].Name, bd[0], bd[1], all[:]), Note: notes[i], Report: reports[i]}
		for _, r := range remb {
			if !r.T.Before(ph.Start) && r.T.Before(ph.End) {
				ph.REMB = append(ph.REMB, r)
			}
		}
		res.Phases = append(res.Phases, ph)
	}
	for who, c := range caps {
		for k, n := range c.counts() {
			res.RTCP[who+" "+k] = n
		}
	}
	return res
}

// log writes the time series, each phase's figures, the RTCP seen and the
// feedback negotiated.
func (r *rateSeries) log(t *testing.T) {
	p1, p2 := r.IDs[0], r.IDs[1]
	var b strings.Builder
	fmt.Fprintf(&b, "participants: P1 %s, P2 %s, P3 %s (its downlink shaped)\n", r.IDs[0], r.IDs[1], r.IDs[2])
	fmt.Fprintf(&b, "%-9s %6s | %-38s | %-38s | %-9s | %-11s | %s\n", "phase", "t(s)",
		"P3 from P1: fps frames frz pau nack lost", "P3 from P2: fps frames frz pau nack lost", "REMB P1 P2/P3/fwd", "P2<-P1 fps", "P1 out: target kbps, fps, avail kbps")
	var t0 int64
	if len(r.Phases) > 0 {
		t0 = r.Phases[0].Start.UnixMilli()
	}
	for _, ph := range r.Phases {
		// Interleave P3's samples with the senders' nearest earlier one.
		for _, s3 := range ph.Samples[2] {
			var s1, s2 testbed.PageSample
			for i, s := range ph.Samples[0] {
				if s.T <= s3.T+500 {
					s1, s2 = s, ph.Samples[1][i]
				}
			}
			in := func(from string) string {
				v := s3.Inbound[from].Video
				return fmt.Sprintf("%4.0f %6.0f %3.0f %3.0f %4.0f %5.0f", v.FramesPerSecond, v.FramesDecoded, v.FreezeCount, v.PauseCount, v.NackCount, v.PacketsLost)
			}
			// The newest REMBs by then about P1's video: P2's, P3's, and what the SFU forwarded to P1.
			var remb []string
			for _, where := range []string{"P1+P2 ->SFU", "P3 ->SFU", "P1+P2 SFU->"} {
				v := "-"
				for _, x := range r.REMB {
					if x.T.UnixMilli() <= s3.T && x.Where == where && slices.Contains(x.SSRCs, r.VideoSSRC[0]) {
						v = fmt.Sprintf("%.0f", x.Bitrate/1000)
					}
				}
				remb = append(remb, v)
			}
			o := s1.Outbound["video"]
			fmt.Fprintf(&b, "%-9s %6.1f | %-38s | %-38s | %9s | %11.0f | %6.0f %4.0f %6.0f\n", ph.Name, float64(s3.T-t0)/1000,
				in(p1), in(p2), strings.Join(remb, "/"), s2.Inbound[p1].Video.FramesPerSecond, o.TargetBitrate/1000, o.FramesPerSecond, s1.Pub.AvailableOutgoingBitrate/1000)
		}
	}
	for _, ph := range r.Phases {
		fmt.Fprintf(&b, "phase %s (%v)", ph.Name, ph.End.Sub(ph.Start).Round(100*time.Millisecond))
		if ph.Note != "" {
			fmt.Fprintf(&b, ": %s", ph.Note)
		}
		if ph.Report != "" {
			fmt.Fprintf(&b, "\n  at the end: %s", ph.Report)
		}
		fmt.Fprintf(&b, "\n  P1 video out: %+v\n", ph.Outbound(0))
		fmt.Fprintf(&b, "  P2 from P1: %+v\n  P1 from P2: %+v\n", ph.Inbound(1, p1), ph.Inbound(0, p2))
		fmt.Fprintf(&b, "  P3 from P1: %+v\n  P3 from P2: %+v\n", ph.Inbound(2, p1), ph.Inbound(2, p2))
		for i, ssrc := range r.VideoSSRC {
			for _, where := range []string{"P1+P2 ->SFU", "P3 ->SFU", "P1+P2 SFU->"} {
				fmt.Fprintf(&b, "  REMBs about P%d's video, %s: %s\n", i+1, where, rembSummary(ph.REMBFor(where, ssrc)))
			}
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.RTCP {
			if !yield(k) {
				return
			}
		}
	})
	fmt.Fprintf(&b, "RTCP packets over the run:")
	for _, k := range keys {
		fmt.Fprintf(&b, " [%s: %d]", k, r.RTCP[k])
	}
	fmt.Fprintf(&b, "\nnegotiated: SFU's answer to P1: %q\n", r.Negotiated[0].PubAnswer)
	for id, s := range r.Negotiated[2].Subs {
		fmt.Fprintf(&b, "  SFU's offer to P3 for %s: %q\n  P3's answer: %q\n", id, s.Offer, s.Answer)
		break
	}
	t.Log(b.String())
}

// rtcpCapture counts the RTCP packets (by type, each packet of a compound)
// that cross iface in a namespace to or from the SFU's media socket, and
// keeps the REMBs.
type rtcpCapture struct {
	mu    sync.Mutex
	name  string         // "P3", "P1+P2"
	count map[string]int // "->SFU REMB", "SFU-> SR", ...
	remb  []rembSample
	done  chan struct{}
	// stopFn ends the reading and waits for it; nil if it never started.
	stopFn func()
}

// startRTCPCapture reads iface's traffic in ns with a packet socket until
// ctx ends or stop is called. A capture that cannot start is logged and
// counts nothing.
func startRTCPCapture(t *testing.T, ctx context.Context, name string, ns *netns.NS, iface string) *rtcpCapture {
	c := &rtcpCapture{name: name, count: map[string]int{}, done: make(chan struct{})}
	var fd int
	err := ns.Do(func() error {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		// ETH_P_ALL: a socket bound to one protocol sees only what comes in.
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		t.Logf("RTCP capture on %s: %v", iface, err)
		close(c.done)
		return c
	}
	stop := make(chan struct{})
	var once sync.Once
	c.stopFn = func() { once.Do(func() { close(stop) }); <-c.done }
	t.Cleanup(c.stop)
	go func() {
		defer close(c.done)
		defer unix.Close(fd)
		buf := make([]byte, 65536)
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if !ok || ll.Protocol != htons(unix.ETH_P_IP) {
				continue
			}
			c.packet(buf[:n], ll.Pkttype == unix.PACKET_OUTGOING)
		}
	}()
	return c
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packet counts one IPv4 datagram's RTCP, if it carries any to or from the SFU.
func (c *rtcpCapture) packet(b []byte, out bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != unix.IPPROTO_UDP {
		return
	}
	ihl := int(b[0]&0xf) * 4
	if len(b) < ihl+8+8 {
		return
	}
	src, _ := netip.AddrFromSlice(b[12:16])
	dst, _ := netip.AddrFromSlice(b[16:20])
	udp := b[ihl:]
	sport, dport := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
	sfu := testbed.SFUMedia
	var dir string
	switch {
	case out && dst == sfu.Addr() && dport == sfu.Port():
		dir = "->SFU"
	case !out && src == sfu.Addr() && sport == sfu.Port():
		dir = "SFU->"
	default:
		return
	}
	p := udp[8:]
	if p[0]>>6 != 2 || p[1] < 192 || p[1] > 223 {
		return // RTP, STUN
	}
	pkts, err := rtcp.Unmarshal(p)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.count[dir+" unparsed"]++
		return
	}
	for _, pkt := range pkts {
		c.count[dir+" "+rtcpName(pkt)]++
		if r, ok := pkt.(*rtcp.ReceiverEstimatedMaximumBitrate); ok {
			c.remb = append(c.remb, rembSample{Where: c.name + " " + dir, T: now, Bitrate: float64(r.Bitrate), SSRCs: r.SSRCs})
		}
	}
}

func rtcpName(p rtcp.Packet) string {
	switch p.(type) {
	case *rtcp.SenderReport:
		return "SR"
	case *rtcp.ReceiverReport:
		return "RR"
	case *rtcp.SourceDescription:
		return "SDES"
	case *rtcp.Goodbye:
		return "BYE"
	case *rtcp.ReceiverEstimatedMaximumBitrate:
		return "REMB"
	case *rtcp.TransportLayerNack:
		return "NACK"
	case *rtcp.PictureLossIndication:
		return "PLI"
	case *rtcp.FullIntraRequest:
		return "FIR"
	case *rtcp.TransportLayerCC:
		return "TWCC"
	case *rtcp.ExtendedReport:
		return "XR"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", p), "*rtcp.")
}

func (c *rtcpCapture) stop() {
	if c.stopFn != nil {
		c.stopFn()
	}
}

func (c *rtcpCapture) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.count))
	for k, v := range c.count {
		m[k] = v
	}
	return m
}

func (c *rtcpCapture) rembs() []rembSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := slices.Clone(c.remb)
	sort.Slice(r, func(i, j int) bool { return r[i].T.Before(r[j].T) })
	return r
}

// rembRange is the lowest and highest estimate among r, in bit/s (0, 0:
// none).
func rembRange(r []rembSample) (lo, hi float64) {
	for i, x := range r {
		if i == 0 {
			lo, hi = x.Bitrate, x.Bitrate
		}
		lo, hi = min(lo, x.Bitrate), max(hi, x.Bitrate)
	}
	return lo, hi
}
