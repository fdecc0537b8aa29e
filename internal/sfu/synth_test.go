package sfu

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// One synthetic publisher replays the captured Chromium stream (Opus and
// AV1) to 100 synthetic receivers, all joined through the SFU's signaling
// and ICE: each receiver gets every packet, byte for byte as sent, with
// both data planes; encrypted (DTLS-SRTP: every receiver opens what its
// keys sealed), the same bytes.
func TestSyntheticOneToHundred(t *testing.T) {
	for _, plane := range []string{"ebpf", "user", "user+encrypted", "user+afxdp", "user+afxdp+encrypted+container"} {
		t.Run(plane, func(t *testing.T) { oneToMany(t, plane, 100, false) })
	}
	// Media over IPv6 (signaling stays on IPv4): 20 receivers.
	t.Run("ebpf-ipv6", func(t *testing.T) { oneToMany(t, "ebpf", 20, true) })
}

func oneToMany(t *testing.T, plane string, receivers int, v6 bool) {
	// One media socket per family: the participants take their own.
	tb, dp, hosts := testbedSFU(t, plane, testbed.SFUMedia, netip.AddrPortFrom(testbed.ServerClientIP6, testbed.SFUMedia.Port()))
	cfg := synth.Config{Net: synth.NetIn(tb.Client), Server: testbed.SFUWeb.String(), Room: "scale", Token: testbed.SFUTokens("scale"),
		Ledger: &synth.Ledger{}, IPv6: v6}
	if strings.Contains(plane, "+encrypted") {
		// The page and its signaling over HTTPS, with the certificate the
		// SFU made itself (what is checked here is the media).
		cfg.Encrypted, cfg.SignalingTLS = true, &tls.Config{InsecureSkipVerify: true}
	}
	// The receivers take turns over the hosts (with AF_XDP, two veths:
	// replicas leave by the TX ring of each).
	receiverCfgs := make([]synth.Config, receivers)
	for i := range receiverCfgs {
		receiverCfgs[i] = cfg
		receiverCfgs[i].Net = synth.NetIn(hosts[i%len(hosts)])
	}
	pub, stream, rcv, count := onePass(t, cfg, receiverCfgs)
	missing, worst := requireEveryPacket(t, pub, stream, rcv, count)
	o, err := dp.Outcomes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (IPv6 %v): %d packets to %d receivers, %d missing, worst jitter %v; data plane: replicated %d, replicas %d, gated %d",
		plane, v6, count, receivers, missing, worst, o[dataplane.Replicated].Packets, o[dataplane.Replica].Packets, o[dataplane.Gated].Packets)
	if o[dataplane.Replica].Packets < uint64(count*receivers) {
		t.Errorf("data plane counted %d replicas, want %d", o[dataplane.Replica].Packets, count*receivers)
	}
	requireAdminRoom(t, pub.ID, receivers, count)
	if strings.Contains(plane, "+afxdp") {
		m, err := testbed.ScrapeMetrics(tb.Client, testbed.ServerClientIP4.String()+":9108")
		if err != nil {
			t.Fatal(err)
		}
		xdp, kernel, partial := m.AFXDPPaths() // the kernel socket's only: partial-looking checksums
		t.Logf("media sockets: %v datagrams through AF_XDP, %v through the kernel socket (%v partial-looking)", xdp, kernel, partial)
		if xdp+kernel < float64(count) || kernel != partial {
			t.Errorf("media through AF_XDP %v and the kernel socket %v (want at least the publisher's %d, the kernel's only the %v partial-looking)", xdp, kernel, count, partial)
		}
		// The replicas leave through the TX ring (WriteBatch), but the
		// first to each receiver (its neighbour resolved by the kernel)
		// and any stale-neighbour confirmations.
		sentXDP := m.Labeled("ebrtc_afxdp_sent_total", map[string]string{"path": "xdp"})
		t.Logf("replicas through the TX ring: %v of %d", sentXDP, count*receivers)
		if sentXDP < 0.9*float64(count*receivers) {
			t.Errorf("%v replicas through the AF_XDP TX ring of %d; the kernel socket's: %v", sentXDP, count*receivers,
				m.Labeled("ebrtc_afxdp_sent_total", nil)-sentXDP)
		}
	}
}

// The synthetic participants meet in Janus's VideoRoom too (the
// benchmark's user-space SFU to compare against): one publisher, five
// receivers (some on a second client host, which must pick Janus's
// candidate on its own path among those Janus offers), one pass of the
// capture; each receiver gets every audio and video packet (Janus gives each subscriber SSRCs of its own, so packets
// are counted per medium: audio is Opus, payload type 111, in both).
// Janus with its DTLS-SRTP on (its default) and off (the plain rows).
func TestJanusSyntheticMeeting(t *testing.T) {
	for _, encrypted := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "encrypted"}[encrypted], func(t *testing.T) { janusMeeting(t, encrypted) })
	}
}

func janusMeeting(t *testing.T, encrypted bool) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "janus")
	tb, err := testbed.New()
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	var log bytes.Buffer
	j, err := tb.StartJanus(t.TempDir(), &log, encrypted)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		_ = j.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("janus:\n%s", log.String())
		}
	})
	host2, _, _, err := tb.AddClient(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := synth.Config{Net: synth.NetIn(tb.Client), Server: testbed.JanusAPI.String(), Room: "janus", Janus: true, Encrypted: encrypted}
	var receivers []synth.Config
	for i := range 5 {
		cfg := cfg
		if i%2 == 1 {
			cfg.Net = synth.NetIn(host2)
		}
		receivers = append(receivers, cfg)
	}
	pub, stream, rcv, count := onePass(t, cfg, receivers)
	medium := func(pt uint8) string { return map[bool]string{true: "audio", false: "video"}[pt == 111] }
	want := map[string]int{}
	for k := range count {
		b, _, _ := stream.Packet(k)
		want[medium(b[1]&0x7f)]++
	}
	time.Sleep(500 * time.Millisecond)
	for i, r := range rcv {
		got := map[string]int{}
		per, mismatched, _ := r.Incoming()[pub.ID].Stats()
		if mismatched != 0 {
			t.Errorf("receiver %d: %d packets that did not open", i, mismatched)
		}
		for _, st := range per {
			got[medium(st.PayloadType)] += st.Packets
		}
		for m, w := range want {
			if got[m] < w {
				t.Errorf("receiver %d, %s: %d of %d packets", i, m, got[m], w)
			}
		}
		t.Logf("receiver %d: %v of %v", i, got, want)
	}
}

// onePass joins a publisher and a receiver per receivers' config, waits
// until every receiver is bound for the publisher's stream, and sends one
// pass of the capture 1.5 times as fast as captured.
func onePass(t *testing.T, publisher synth.Config, receivers []synth.Config) (*synth.Participant, *synth.Stream, []*synth.Participant, int) {
	t.Helper()
	pub, stream, rcv, count := joinPass(t, publisher, receivers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sent, err := pub.Send(ctx, 0, count, 1.5); err != nil || sent != count {
		t.Fatalf("sent %d of %d: %v", sent, count, err)
	}
	return pub, stream, rcv, count
}

// joinPass is onePass up to the sending: the publisher publishing the
// capture (count packets), every receiver bound for its stream.
func joinPass(t *testing.T, publisher synth.Config, receivers []synth.Config) (*synth.Participant, *synth.Stream, []*synth.Participant, int) {
	t.Helper()
	rec, err := synth.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := synth.Join(publisher)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Leave)
	stream := rec.NewStream(1)
	if err := pub.Publish(stream); err != nil {
		t.Fatal(err)
	}
	var rcv []*synth.Participant
	for _, cfg := range receivers {
		r, err := synth.Join(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Leave)
		rcv = append(rcv, r)
	}
	if err := synth.AwaitStreams(rcv, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return pub, stream, rcv, len(rec.Packets)
}

// requireAdminRoom: the admin endpoint (ebrtc top) shows the room, its
// publisher with every receiver, and what the data plane forwarded.
func requireAdminRoom(t *testing.T, publisher string, receivers, count int) {
	t.Helper()
	st, err := admin.Fetch(context.Background(), sfuAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Server != "sfu" || len(st.Rooms) != 1 || st.Rooms[0].Name != "scale" || len(st.Rooms[0].Participants) != receivers+1 {
		t.Fatalf("admin status: %d rooms %+v", len(st.Rooms), st.Rooms)
	}
	for _, p := range st.Rooms[0].Participants {
		if p.ID != publisher {
			continue
		}
		if !p.Publishes.IsValid() || p.Receivers != receivers || p.Sent.Packets < uint64(count) || p.Forwarded.Packets < uint64(count*receivers) {
			t.Errorf("publisher in the admin status: %+v", p)
		}
		return
	}
	t.Errorf("publisher %s not in the admin status", publisher)
}
