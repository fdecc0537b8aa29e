package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

type inbound struct {
	PacketsReceived, PacketsLost, FramesDecoded, FreezeCount, NackCount, FrameWidth float64
	TotalAudioEnergy                                                                *float64 // Chromium's; Firefox may not say
	Codec                                                                           string
}

// Three headless Chromium participants meet through ebrtc sfu on the
// namespace testbed, set up as a container host is, for 30 s: each receives the others' audio and video,
// decoded, without loss or freezes (but those of the machine's CPU, with every
// packet there); the media is forwarded by the eBPF data
// plane; one leaves and rejoins and decodes everyone again within 2 s.
// One shares a screen (a canvas at 640x360) besides its camera, on a
// connection of its own: every other page decodes it at its size, and the
// rejoining page decodes it too (its own key-frame gate in the data
// plane). Another speaks (a tone, against the others' fake microphones):
// every page highlights it, as the eBPF data plane's audio levels rank it.
// This is --unencrypted-media (browsers with their encryption off): the
// wire check finds the payloads in the clear, as it must.
func TestBrowserMeeting(t *testing.T) {
	m := browserMeetingChecked(t, "ebpf", meetingSpec{browsers: "chromium", publishers: 3, toggle: -1, screen: 1, speaker: 2})
	flows, total := m.wire.plain()
	t.Logf("wire: %d RTP packets captured in %d flows (by payload type), %d of them plain", total, len(m.wire), len(flows))
	if len(flows) < 6 {
		t.Errorf("the wire check finds %d plain flows in a plain meeting, want every publisher's and replica's: %v", len(flows), flows)
	}
}

// The same meeting with ebrtc sfu's defaults: encrypted media (DTLS-SRTP,
// the user data plane) and the page over HTTPS, the browsers as they ship
// (no WebRTC switch: chromium.mjs, firefox.mjs), mixed: Firefox ESR (the
// one that leaves and rejoins) and Chromium, in VP8, which both send; and
// what people do in meetings: one joins with its camera off (audio only,
// ?camera=off), one with a viewer's token (receives only), and one turns
// its camera off and mutes its microphone for a third of the meeting;
// another speaks (a tone), and every page, Firefox's and the viewer's
// too, highlights it (the user data plane's audio levels, read from the
// decrypted packets). (No screen here: with one, the Firefox page's feedback showed it taking
// 200-350 kbit/s, and the SFU paused two of its streams in one run of
// four: docs/sfu.md, "Screen share".)
// The same requirements hold; every connection negotiated AES-GCM, the
// page says the room is encrypted, nothing failed authentication, and the
// wire carries no payload in the clear.
func TestBrowserMeetingEncrypted(t *testing.T) {
	m := browserMeetingChecked(t, "user+encrypted+vp8", meetingSpec{browsers: "firefox,chromium,chromium,chromium,chromium", publishers: 3, audioOnly: 1, viewers: 1, toggle: 2, speaker: 1})
	if m.res.Media != "encrypted" {
		t.Errorf("the page says the room's media is %q", m.res.Media)
	}
	t.Logf("SRTP ciphers by participant and connection: %v", m.res.Ciphers)
	for i, cs := range m.res.Ciphers {
		if len(cs) == 0 && i == 0 { // (Firefox may not report transport stats)
			continue
		}
		// Every page has a connection per publisher (its own send-only one
		// or a receive-only one): 4.
		if len(cs) != 4 || slices.ContainsFunc(cs, func(c string) bool { return c != "SRTP_AEAD_AES_128_GCM" }) {
			t.Errorf("participant %d's connections negotiated %v, want SRTP_AEAD_AES_128_GCM on each of 4", i, cs)
		}
	}
	if o := m.outcomes; o[dataplane.Unauthentic].Packets != 0 || o[dataplane.DTLS].Packets == 0 ||
		100*o[dataplane.Unprotected].Packets > o[dataplane.Replicated].Packets {
		t.Errorf("data plane: %d unauthentic, %d DTLS, %d unprotected of %d replicated", o[dataplane.Unauthentic].Packets,
			o[dataplane.DTLS].Packets, o[dataplane.Unprotected].Packets, o[dataplane.Replicated].Packets)
	}
	flows, total := m.wire.plain()
	t.Logf("wire: %d RTP packets captured in %d flows (by payload type)", total, len(m.wire))
	if len(flows) > 0 || total < 1000 {
		t.Errorf("the wire carries plain RTP in %v (of %d packets captured)", flows, total)
	}
}

// checkedMeeting is what a browser meeting left to check beyond the
// common requirements.
type checkedMeeting struct {
	res struct {
		Stats    []map[string]map[string]inbound
		IDs      []string
		Views    []map[string]struct{ Audio, Video bool }
		Paused   []map[string]bool
		Speakers []string
		RejoinMs float64
		Media    string
		Ciphers  [][]string
		Toggle   *toggleResult
	}
	outcomes map[dataplane.Outcome]dataplane.Counter
	wire     wireCapture
}

// toggleResult is meeting.mjs's TOGGLE: every page's stats 2 s after the
// participant turned camera and microphone off and just before it turned
// them on, what each page showed of it, and its video sender's bytes.
type toggleResult struct {
	ID                  string
	Off, On             []map[string]map[string]inbound
	Views               []*struct{ Audio, Video bool }
	SentAtOff, SentAtOn float64
}

// browserMeetingChecked runs a 30 s meeting of spec's publishers and
// viewers on plane (testbedSFU) with the wire captured, and holds it to
// what every meeting must do.
func browserMeetingChecked(t *testing.T, plane string, spec meetingSpec) *checkedMeeting {
	tb, dp, _ := testbedSFU(t, plane, testbed.SFUMedia)
	spec.seconds = 30
	participants, publishers, seconds := spec.participants(), spec.publishers+spec.audioOnly, float64(spec.seconds)
	scraped := make(chan sfuScrape, 1)
	captured := make(chan wireCapture, 1)
	spec.scheme = map[bool]string{true: "https", false: "http"}[strings.Contains(plane, "+encrypted")]
	video := map[bool]string{true: "video/VP8", false: "video/AV1"}[strings.HasSuffix(plane, "+vp8")]
	stdout, stderr := browserMeetingAt(t, tb, spec, func(meeting context.Context) {
		go func() {
			w, err := captureWire(tb, meeting)
			if err != nil {
				t.Errorf("capture: %v", err)
			}
			captured <- w
		}()
		scraped <- scrapeDuringMeeting(tb.Client, meeting)
	})
	m := &checkedMeeting{wire: <-captured}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m.res); err != nil {
		t.Fatalf("meeting output %q: %v", stdout, err)
	}
	pages := m.res.Stats
	t.Logf("pages: %+v\nbrowser log:\n%s", pages, stderr)
	if len(pages) != participants {
		t.Fatalf("%d pages", len(pages))
	}
	toggled := ""
	if spec.toggle >= 0 {
		if m.res.Toggle == nil || m.res.Toggle.ID == "" {
			t.Fatal("no toggle in the meeting's output")
		}
		toggled = m.res.Toggle.ID
	}
	if len(m.res.IDs) != participants {
		t.Fatalf("%d page ids", len(m.res.IDs))
	}
	audioOnly := map[string]bool{}
	for _, id := range m.res.IDs[spec.publishers:publishers] {
		audioOnly[id] = true
	}
	streamIDs := slices.Clone(m.res.IDs[:publishers])
	screen := ""
	if spec.screen > 0 {
		screen = m.res.IDs[spec.screen] + ":screen"
		streamIDs = append(streamIDs, screen)
	}
	// Loss that receivers of a publisher share, packet for packet (all
	// those there at the time: one joining later has none), happened
	// before the SFU replicated: the publisher's browser stalled (five
	// browsers on 2 CPUs) or its uplink. A freeze of it is the machine's,
	// as above; loss the SFU caused on one leg is that leg's alone.
	upstream := map[string]bool{}
	for _, from := range streamIDs {
		var lost []float64
		for _, streams := range pages {
			if s, ok := streams[from]; ok && s["audio"].PacketsLost+s["video"].PacketsLost > 0 {
				lost = append(lost, s["audio"].PacketsLost+s["video"].PacketsLost)
			}
		}
		upstream[from] = len(lost) >= 2 && slices.Max(lost)-slices.Min(lost) <= 2
	}
	for i, streams := range pages {
		want := len(streamIDs) // a viewer receives every stream; a publisher the others'
		if i < publishers {
			want--
		}
		if i == spec.screen && screen != "" {
			want--
		}
		if len(streams) != want {
			t.Errorf("participant %d receives %d streams, want %d", i, len(streams), want)
		}
		for from, s := range streams {
			v, a := s["video"], s["audio"]
			// The page asks for 320x180 in AV1 (L1T3); the SFU negotiates one
			// video codec (AV1 or VP8) and Opus. A freeze with every packet
			// there and none asked again is the machine's CPU (three
			// browsers and the SFU on 2 CPUs), not the SFU's doing: as the
			// shaped-receiver judge, such a stream may freeze every 10 s
			// (every 6 s with Firefox in the meeting: 1-3 a stream seen in
			// clean runs); one that lost or asked again may not. The
			// participant whose camera was off a third of the time sends a
			// third fewer frames, and its camera's return may count as one
			// more freeze.
			cpuFreezes, frames := 0.0, 5*seconds
			if v.PacketsLost == 0 && v.NackCount == 0 || upstream[from] {
				cpuFreezes = seconds / 10
				if strings.Contains(spec.browsers, "firefox") {
					cpuFreezes = seconds / 6
				}
			}
			if from == toggled {
				cpuFreezes, frames = cpuFreezes+1, frames*2/3
				if m.res.Paused[i][from] {
					// Seen before the link kept a silent stream's place
					// (docs/sfu.md, "A stream back from silence"): the stream
					// back from camera-off stayed paused for a receiver
					// (Firefox), its page saying so; checkToggle counts it.
					frames, cpuFreezes = 0, seconds
				}
			}
			if from == screen {
				// A screen: a 640x360 canvas, video alone, from a few
				// seconds in; a screen capture's content hint keeps its
				// resolution over its frame rate under load.
				if v.FramesDecoded < 2*seconds || v.FreezeCount > cpuFreezes || v.FrameWidth != 640 || v.Codec != video ||
					v.PacketsLost > v.PacketsReceived/100 || len(s) != 1 {
					t.Errorf("participant %d from %s (a screen): %+v", i, from, s)
				}
				continue
			}
			if audioOnly[from] {
				// Its video section is there (its camera may come on) but
				// brings no frame (the SFU may probe a receiver's link with
				// padding on it); its page says so to everyone.
				if v.FramesDecoded != 0 || a.PacketsReceived < 10*seconds || !m.res.Views[i][from].Video || m.res.Views[i][from].Audio {
					t.Errorf("participant %d from %s (camera off from the start): video %+v, audio %+v, shown as %+v", i, from, v, a, m.res.Views[i][from])
				}
				continue
			}
			if v.FramesDecoded < frames || a.PacketsReceived < 10*seconds || v.FreezeCount > cpuFreezes ||
				v.PacketsLost+a.PacketsLost > (v.PacketsReceived+a.PacketsReceived)/100 ||
				v.Codec != video || a.Codec != "audio/opus" || v.FrameWidth != 320 {
				t.Errorf("participant %d from %s: video %+v, audio %+v", i, from, v, a)
			}
		}
	}
	if spec.speaker > 0 {
		// The data plane read every publisher's audio levels, the SFU
		// ranked them, and every page highlights the one speaking (its
		// own page, itself).
		t.Logf("each page highlights as speaking: %v (participant %d speaks)", m.res.Speakers, spec.speaker)
		for i, s := range m.res.Speakers {
			if s != m.res.IDs[spec.speaker] {
				t.Errorf("participant %d highlights %q, want %q (participant %d, who speaks)", i, s, m.res.IDs[spec.speaker], spec.speaker)
			}
		}
	}
	if spec.toggle >= 0 {
		checkToggle(t, m.res.Toggle, spec.toggle, pages, m.res.Paused)
		if t.Failed() {
			t.Logf("whose video the SFU paused for each page, at the end: %v", m.res.Paused)
		}
	}
	// Key frames come on request: the rejoining browser's own PLIs, routed
	// by the agent, and the SFU's when it adds the receiver (deduplicated).
	t.Logf("rejoined and decoding every stream after %v ms", m.res.RejoinMs)
	if m.res.RejoinMs <= 0 || m.res.RejoinMs > 2000 {
		t.Errorf("a participant that left and rejoined decoded every stream after %v ms, want within 2 s", m.res.RejoinMs)
	}
	o, err := dp.Outcomes()
	if err != nil {
		t.Fatal(err)
	}
	m.outcomes = o
	t.Logf("data plane: %v", o)
	sc := <-scraped
	legs := len(streamIDs) * (participants - 1)
	t.Logf("metrics, the fullest scrape: %v participants, receiver series %v", sc.participants, sc.receivers)
	if sc.participants != float64(participants) || len(sc.receivers) != legs || sc.replicas == 0 {
		t.Errorf("metrics: %v participants in the room, %d receiver series (want %d, each with packets), %v replicas",
			sc.participants, len(sc.receivers), legs, sc.replicas)
	}
	for pair, n := range sc.receivers {
		if n == 0 {
			t.Errorf("metrics: receiver %s got no packets", pair)
		}
	}
	// Media that reached the SFU before its receiver's connection was bound
	// is dropped (no_receivers); everything else is the data plane's.
	// Probes are no media (padding); the eBPF program hands them up as
	// unknown_sender, and its slow path counts them probes.
	fwd := float64(o[dataplane.Replicated].Packets)
	var notFwd float64
	for _, k := range []dataplane.Outcome{dataplane.NoReceivers, dataplane.UnknownSender, dataplane.SourceRefused,
		dataplane.NoRoute, dataplane.Malformed, dataplane.Segmented, dataplane.RewriteFailed} {
		notFwd += float64(o[k].Packets)
	}
	if _, kernel := dp.(*dataplane.DataPlane); kernel {
		notFwd -= float64(o[dataplane.Probe].Packets)
	}
	if fwd < 500 || fwd/(fwd+notFwd) < 0.95 {
		t.Errorf("the data plane forwarded %v media datagrams and not %v, want >= 95%%", fwd, notFwd)
	}
	return m
}

// checkToggle: while the participant's camera was off and its microphone
// muted, every other page showed it so, decoded no frame of it (its sender
// sent next to nothing) and, where the browser measures it, heard
// silence from it while it heard the others; once back on, every page
// decoded it again.
func checkToggle(t *testing.T, tg *toggleResult, toggler int, final []map[string]map[string]inbound, paused []map[string]bool) {
	t.Helper()
	stillPaused := 0
	t.Logf("toggle: %s's video sender sent %v bytes while off", tg.ID, tg.SentAtOn-tg.SentAtOff)
	if tg.SentAtOn-tg.SentAtOff > 10_000 {
		t.Errorf("the camera-off participant's video sender sent %v bytes in the 8 s it was off", tg.SentAtOn-tg.SentAtOff)
	}
	for i := range final {
		if i == toggler {
			continue
		}
		if v := tg.Views[i]; v == nil || !v.Audio || !v.Video {
			t.Errorf("participant %d's page shows the toggled participant as %+v, want audio and video off", i, v)
		}
		off, on, end := tg.Off[i][tg.ID], tg.On[i][tg.ID], final[i][tg.ID]
		if d := on["video"].FramesDecoded - off["video"].FramesDecoded; d > 3 {
			t.Errorf("participant %d decoded %v frames of a camera that was off", i, d)
		}
		switch d := end["video"].FramesDecoded - on["video"].FramesDecoded; {
		case d < 15 && paused[i][tg.ID]:
			// Seen before the link kept a silent stream's place (its
			// rare cause, a stall in the silence, is reproduced by
			// ratecontrol's TestStreamBackFromSilence): the SFU paused it
			// for this receiver and said so; one page at most.
			t.Logf("participant %d: the camera back on stays paused for it (%v frames after)", i, d)
			if stillPaused++; stillPaused > 1 {
				t.Errorf("%d pages keep the camera back on paused", stillPaused)
			}
		case d < 15:
			t.Errorf("participant %d decoded %v frames in the 10 s after the camera came back", i, d)
		}
		if e0, e1 := off["audio"].TotalAudioEnergy, on["audio"].TotalAudioEnergy; e0 != nil && e1 != nil {
			var heard float64 // the most of another publisher in the same time
			for from, s := range tg.On[i] {
				if from != tg.ID && s["audio"].TotalAudioEnergy != nil && tg.Off[i][from]["audio"].TotalAudioEnergy != nil {
					heard = max(heard, *s["audio"].TotalAudioEnergy-*tg.Off[i][from]["audio"].TotalAudioEnergy)
				}
			}
			muted := *e1 - *e0
			t.Logf("participant %d heard audio energy %v of the muted participant and %v of another in the same time", i, muted, heard)
			if heard > 0 && muted > heard/20 {
				t.Errorf("participant %d heard %v of the muted participant's audio energy and %v of another's", i, muted, heard)
			}
		}
	}
}

// sfuScrape is what one scrape of ebrtc sfu's metrics said of the room.
type sfuScrape struct {
	participants float64
	receivers    map[string]float64 // "ebrtc_sfu_receiver_packets_total{labels}" -> packets, when > 0
	replicas     float64
}

// scrapeDuringMeeting reads the SFU's metrics from the client namespace
// every 2 s while the meeting runs and keeps the scrape with the most
// receiver series with packets.
func scrapeDuringMeeting(client *netns.NS, ctx context.Context) sfuScrape {
	var best sfuScrape
	for i := 0; i < 60; i++ {
		select {
		case <-ctx.Done():
			return best
		case <-time.After(2 * time.Second):
		}
		m, err := testbed.ScrapeMetrics(client, testbed.ServerClientIP4.String()+":9108")
		if err != nil {
			continue
		}
		s := sfuScrape{receivers: map[string]float64{}, participants: m.Labeled("ebrtc_sfu_participants", nil),
			replicas: m.Labeled("ebrtc_sfu_datagrams_total", map[string]string{"outcome": "replica"})}
		for key, n := range m {
			if strings.HasPrefix(key, "ebrtc_sfu_receiver_packets_total{") && n > 0 {
				s.receivers[key] = n
			}
		}
		if len(s.receivers) >= len(best.receivers) {
			best = s
		}
	}
	return best
}

// meetingSFU is ebrtc sfu with the eBPF data plane on a testbed set up as
// a container host has it (the browsers' veths send partial checksums and
// run no XDP): the web server at testbed.SFUWeb, metrics at :9108,
// media at testbed.SFUMedia.
func meetingSFU(t *testing.T) (*testbed.Testbed, dataplane.Plane) {
	tb, dp, _ := testbedSFU(t, "ebpf", testbed.SFUMedia)
	return tb, dp
}

// testbedSFU is meetingSFU with either data plane and these media sockets.
// sfuAdmin is the admin endpoint of the SFU testbedSFU runs (one at a time).
var sfuAdmin = fmt.Sprintf("unix:%s/ebrtc-sfu-test-%d.sock", os.TempDir(), os.Getpid())

// hosts are the client namespaces behind the SFU's veths: the testbed's
// client and, with AF_XDP, a second (AF_XDP sockets on both veths).
func testbedSFU(t *testing.T, plane string, media ...netip.AddrPort) (tb *testbed.Testbed, dp dataplane.Plane, hosts []*netns.NS) {
	return testbedSFUWith(t, plane, nil, media...)
}

// testbedSFUWith is testbedSFU with the SFU's config changed by tweak
// (if not nil) before it starts. By default a host joins as fast as a
// hundred synthetic participants on it do (testbed.SFUJoinRate).
func testbedSFUWith(t *testing.T, plane string, tweak func(*Config), media ...netip.AddrPort) (tb *testbed.Testbed, dp dataplane.Plane, hosts []*netns.NS) {
	testenv.RequireRoot(t)
	// plane "user+afxdp": the user data plane receiving and sending through
	// AF_XDP, on a testbed whose hosts send full checksums (a container
	// host's partial ones all take the kernel socket: pkg/afxdp), or with
	// "+container" on one left as a container host leaves it (every other
	// plane runs there). Suffixes in this order:
	// user+afxdp+encrypted+container+vp8.
	// plane "...+vp8": VP8 the room's video codec (Firefox and Chromium
	// both send it; AV1 otherwise).
	codecs := signaling.DefaultCodecs
	if p, ok := strings.CutSuffix(plane, "+vp8"); ok {
		plane, codecs.Video = p, "VP8"
	}
	plane, container := strings.CutSuffix(plane, "+container")
	// plane "user+encrypted": DTLS-SRTP, and the page over HTTPS with a
	// self-signed certificate (else plain RTP, and plain HTTP).
	plane, encrypted := strings.CutSuffix(plane, "+encrypted")
	opts, rx := testbed.Options{Unprepared: true}, "kernel"
	if p, ok := strings.CutSuffix(plane, "+afxdp"); ok {
		plane, rx, opts = p, "afxdp", testbed.Options{Unprepared: container}
	}
	webTLS := web.TLS{Plain: true}
	if encrypted {
		webTLS = web.TLS{Dir: t.TempDir(), Hosts: []string{testbed.SFUWeb.Addr().String()}}
	}
	tb, err := testbed.NewWith(opts)
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	hosts = []*netns.NS{tb.Client}
	var ifaces []string // the eBPF data plane's, or AF_XDP's
	if plane == "ebpf" || rx == "afxdp" {
		ifaces = []string{testbed.ServerCliIface}
	}
	if rx == "afxdp" {
		ns, _, link, err := tb.AddClient(1)
		if err != nil {
			t.Fatal(err)
		}
		hosts, ifaces = append(hosts, ns), append(ifaces, link)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dataplane.Plane, 1)
	done := make(chan error, 1)
	cfg := Config{Listen: testbed.SFUWeb.String(), Web: webTLS, Dataplane: plane, RX: rx, Unencrypted: !encrypted, Codecs: codecs,
		Access:        access.Config{Secret: []byte(testbed.SFUTokenSecret), JoinRate: testbed.SFUJoinRate, JoinBurst: testbed.SFUJoinRate},
		MetricsListen: testbed.ServerClientIP4.String() + ":9108",
		AdminListen:   sfuAdmin,
		Media:         media,
		Ifaces:        ifaces,
		Ready:         func(_ net.Addr, p dataplane.Plane) { ready <- p }}
	if os.Getenv("EBRTC_TEST_LOG") == "debug" {
		cfg.Log = testLog() // rate control's decisions and the legs'
	}
	if tweak != nil {
		tweak(&cfg)
	}
	go func() { done <- tb.Server.Do(func() error { return Run(ctx, cfg) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sfu: %v", err)
		}
	})
	select {
	case plane := <-ready:
		return tb, plane, hosts
	case err := <-done:
		t.Fatalf("sfu: %v", err)
	}
	return nil, nil, nil
}

// browserMeeting runs meeting.mjs: n headless Chromium participants in
// room "test" for the given seconds, then a rejoin. during runs meanwhile,
// until the browsers are done. It returns what the script printed.
func browserMeeting(t *testing.T, tb *testbed.Testbed, n, seconds int, during func(meeting context.Context)) (stdout, stderr string) {
	return browserMeetingScheduled(t, tb, n, seconds, "", during)
}

// browserMeetingScheduled is browserMeeting with meeting.mjs's SCHEDULE
// for the first participant's video encoder (none if empty), e.g.
// "L1T3,L1T2,L1T3/2": scalability modes and resolution scales, applied
// evenly across the seconds.
func browserMeetingScheduled(t *testing.T, tb *testbed.Testbed, n, seconds int, schedule string, during func(meeting context.Context)) (stdout, stderr string) {
	return browserMeetingAt(t, tb, meetingSpec{scheme: "http", browsers: "chromium", publishers: n, seconds: seconds, schedule: schedule, toggle: -1}, during)
}

// meetingSpec is a browser meeting (meeting.mjs): who joins with which
// browser, for how long, doing what.
type meetingSpec struct {
	scheme   string // https: ebrtc sfu's default, encrypted media; http: --unencrypted-media
	browsers string // the participants' browsers in turn (meeting.mjs's BROWSERS)
	// publishers join first, each with a publisher's token; then the
	// audioOnly ones, publishers whose camera is off from the start
	// (?camera=off); viewers last, with a viewer's token (they receive
	// only).
	publishers, audioOnly, viewers int
	seconds                        int
	schedule                       string // the first participant's encoder (meeting.mjs's SCHEDULE)
	toggle                         int    // the participant that turns camera and microphone off and on (TOGGLE), or -1
	// screen is the participant that shares a screen (SCREEN), or 0:
	// none (participant 0 leaves and rejoins).
	screen int
	// speaker is the participant that speaks (SPEAKER: a tone), or 0:
	// none.
	speaker int
	// env is more of meeting.mjs's environment (OTHERS, REJOIN, HOLD).
	env []string
}

func (s meetingSpec) participants() int { return s.publishers + s.audioOnly + s.viewers }

// urls are the pages' addresses, each with its own token.
func (s meetingSpec) urls() string {
	base := s.scheme + "://" + testbed.SFUWeb.String() + "/"
	urls := testbed.SFUPageURLs(base, "test", s.publishers+s.audioOnly)
	for i := s.publishers; i < len(urls); i++ {
		urls[i] = strings.Replace(urls[i], "?", "?camera=off&", 1)
	}
	for i := range s.viewers {
		tok, err := access.Mint([]byte(testbed.SFUTokenSecret), access.Grant{Room: "test", Identity: "viewer-" + strconv.Itoa(i)}, time.Now(), time.Hour)
		if err != nil {
			panic(err)
		}
		urls = append(urls, base+"?token="+tok)
	}
	return strings.Join(urls, " ")
}

// browserMeetingAt runs the meeting spec says; during runs meanwhile,
// until the browsers are done. It returns what the script printed.
func browserMeetingAt(t *testing.T, tb *testbed.Testbed, spec meetingSpec, during func(meeting context.Context)) (stdout, stderr string) {
	run, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	args := []string{spec.urls(), strconv.Itoa(spec.participants()), strconv.Itoa(spec.seconds)}
	if spec.schedule != "" {
		args = append(args, spec.schedule)
	}
	env := slices.Clone(spec.env)
	if spec.toggle >= 0 {
		env = append(env, "TOGGLE="+strconv.Itoa(spec.toggle))
	}
	if spec.screen > 0 {
		env = append(env, "SCREEN="+strconv.Itoa(spec.screen))
	}
	if spec.speaker > 0 {
		env = append(env, "SPEAKER="+strconv.Itoa(spec.speaker))
	}
	var out, errOut bytes.Buffer
	wait := testenv.StartGroup(t, testbed.BrowserScript{NS: tb.Client, Script: "meeting.mjs", Args: args, Browsers: spec.browsers,
		Env: env, Stdout: &out, Stderr: &errOut}.Command(t, run))
	meeting, ended := context.WithCancel(run)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		during(meeting)
	}()
	err := wait()
	ended()
	<-finished
	if err != nil {
		t.Fatalf("meeting: %v\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}
