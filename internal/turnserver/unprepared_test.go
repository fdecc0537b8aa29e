package turnserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A host whose veths were left as container runtimes leave them: no XDP on
// the far ends, TX checksum offload on (partial checksums arrive). ebrtc
// turn with default flags must pick TC there, lose nothing, and leave the
// host's forwarding off. The second setup turns TX checksum offload off on
// the server's ends, so the kernel completes every partial checksum the
// relay emits where the skb says and the receivers verify it.
// The third setup runs XDP on the far ends: auto then puts XDP in front of
// TC, and XDP hands the partial-checksum datagrams to TC.
var unpreparedSetups = []struct {
	name  string
	opts  testbed.Options
	hooks string // what auto must choose
}{
	{"container-host", testbed.Options{Unprepared: true}, "tc"},
	{"checksums-completed", testbed.Options{Unprepared: true, ServerTxChecksumOff: true}, "tc"},
	{"xdp-peers-partial-checksums", testbed.Options{Unprepared: true, FarXDP: true, ServerTxChecksumOff: true}, "xdp+tc"},
}

func TestUnpreparedHostPion(t *testing.T) {
	for _, setup := range unpreparedSetups {
		for _, tc := range clientFamilies {
			t.Run(setup.name+"/"+tc.name, func(t *testing.T) {
				tb := newTestbedWith(t, setup.opts)
				r := startRelay(t, tb)
				requireHooks(t, r, setup.hooks)
				c := newClientOver(t, tb, testbed.ClientOptions{Server: tc.server, Family: tc.family})
				requireFastBothWays(t, r, c, newPeer(t, tb, tc.peer))
				requireNoForwarding(t, tb)
			})
		}
	}
}

func TestUnpreparedHostHairpin(t *testing.T) {
	for _, setup := range unpreparedSetups {
		t.Run(setup.name, func(t *testing.T) {
			tb := newTestbedWith(t, setup.opts)
			requireHairpin(t, tb, startRelay(t, tb))
			requireNoForwarding(t, tb)
		})
	}
}

// coturn's client in its default mode (RTP/RTCP allocation pairs with
// EVEN-PORT and RESERVATION-TOKEN) and in client-to-client mode.
func TestUnpreparedHostCoturnClient(t *testing.T) {
	testenv.RequireCommand(t, "turnutils_uclient")
	testenv.RequireCommand(t, "turnutils_peer")
	for _, mode := range []struct {
		name string
		mode testbed.UclientMode
	}{{"rtp-rtcp-pairs", testbed.UclientRTPPairs}, {"hairpin", testbed.UclientHairpin}} {
		t.Run(mode.name, func(t *testing.T) {
			tb := newTestbedWith(t, testbed.Options{Unprepared: true})
			r := startRelay(t, tb)
			peer, err := tb.StartTurnutilsPeer()
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Stop(2 * time.Second)
			const clients, messages = 4, 300
			lost, out, err := tb.RunTurnutilsUclient(user, pass, clients, messages, mode.mode)
			if err != nil || lost != 0 {
				t.Fatalf("turnutils_uclient: lost %d, %v\n%s\nrelay:\n%s", lost, err, out, r.Output())
			}
			m := metrics(t, r)
			var fast, slow float64
			for _, dir := range []string{"client_to_peer", "peer_to_client"} {
				fast += m.Packets("fast", dir)
				slow += m.Packets("slow", dir)
			}
			if fast < float64(clients*messages) || fast/(fast+slow) < 0.99 {
				t.Errorf("fast %v slow %v: want >= 99%% of at least %d on the fast path", fast, slow, clients*messages)
			}
			requireNoForwarding(t, tb)
		})
	}
}

func TestUnpreparedHostBrowser(t *testing.T) {
	browserRelayCall(t, newTestbedWith(t, testbed.Options{Unprepared: true}), 10, 0.99)
}

// requireHooks checks the hooks auto chose on the server's interfaces.
func requireHooks(t *testing.T, r *testbed.Relay, hooks string) {
	t.Helper()
	m := metrics(t, r)
	for _, iface := range []string{testbed.ServerCliIface, testbed.ServerPeerIface} {
		if m.Labeled("ebrtc_offload_attached", map[string]string{"iface": iface, "mode": hooks}) != 1 {
			t.Errorf("%s: not on %s; log:\n%s", iface, hooks, r.Output())
		}
	}
}

// requireNoForwarding checks that the server namespace forwards nothing:
// ip_forward and every interface but lo (whose forwarding serves the route
// lookups only, bpf/ip.h) at 0, for both families.
func requireNoForwarding(t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	err := tb.Server.Do(func() error {
		for _, glob := range []string{"/proc/sys/net/ipv4/conf/*/forwarding", "/proc/sys/net/ipv6/conf/*/forwarding", "/proc/sys/net/ipv4/ip_forward"} {
			paths, _ := filepath.Glob(glob)
			for _, p := range paths {
				if strings.Contains(p, "/lo/") {
					continue
				}
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if strings.TrimSpace(string(b)) != "0" {
					t.Errorf("%s = %s while the relay runs", p, strings.TrimSpace(string(b)))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Forcing XDP where the veths' far ends run no XDP sends frames into veths
// that drop them: the tracepoints count every one, the interfaces stop
// being XDP egresses at once, and from then on the kernel relays (no TC
// behind forced XDP) with nothing lost. (The far ends send full checksums:
// partial ones XDP would hand to the kernel before sending anything.)
func TestForcedXDPOnUnpreparedHostIsNotSilent(t *testing.T) {
	tb := newTestbedWith(t, testbed.Options{Unprepared: true, FullChecksums: true})
	r := startRelay(t, tb, "--offload", "xdp")
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	bindChannel(t, r, c, peer, 1)
	// Until the first failure the datagrams fall into the veth.
	for i := 0; i < 50; i++ {
		_, _ = c.Relay.WriteTo([]byte("into-the-hole-0123"), peer.LocalAddr())
		time.Sleep(2 * time.Millisecond)
	}
	drain(peer)
	m := waitMetric(t, r, "the failures to be counted", func(m testbed.Metrics) bool {
		return m[`ebrtc_offload_xmit_failures_total{iface="`+testbed.ServerPeerIface+`"}`] > 0
	})
	if m.Outcome("drop_xmit_failed") == 0 {
		t.Errorf("drop_xmit_failed not counted: %v", m)
	}
	// At once: the datagrams after the first refusal (2 ms apart) go
	// elsewhere, though the fast path had cached the interface as an XDP
	// egress (struct path): the demotion voids such caches.
	if lost := m[`ebrtc_offload_xmit_failures_total{iface="`+testbed.ServerPeerIface+`"}`]; lost > 5 {
		t.Errorf("%v of 50 datagrams fell into the veth, want only those before the first refusal (<= 5)", lost)
	}
	// XDP sent them, but none left: the fast counter counts only what did.
	if sent, fast := m.Outcome("fast_client_to_peer"), m.Packets("fast", "client_to_peer"); sent == 0 || fast != 0 {
		t.Errorf("XDP sent %v datagrams towards a veth that took none, and %v are counted as relayed on the fast path", sent, fast)
	}
	said := false
	for key := range metrics(t, r) {
		said = said || strings.HasPrefix(key, "ebrtc_offload_attached{") &&
			strings.Contains(key, testbed.ServerPeerIface) && strings.Contains(key, "took no XDP frames")
	}
	if !said {
		t.Errorf("ebrtc_offload_attached does not say %s failed to take XDP frames", testbed.ServerPeerIface)
	}
	res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 500, 200, 10000)
	requireExchange(t, "client to peer after the failures", res, err)
	// Every one went to the kernel, nearly all for want of an XDP egress (a
	// datagram may meet another reason on the way: a partial checksum, a
	// neighbour being resolved again), and none was sent into the veth.
	after := metrics(t, r)
	deltas := outcomeDeltas(m, after)
	var handed float64
	for _, o := range offload.Outcomes() {
		if o.IsSlow() {
			handed += deltas[o.String()]
		}
	}
	if handed < 500 || deltas["no_egress_port"] < 490 || deltas["fast_client_to_peer"] != 0 || deltas["drop_xmit_failed"] != 0 {
		t.Errorf("of 500 datagrams after the failures, %v handed to the kernel (want all), %v for want of an XDP egress (want >= 490); outcomes meanwhile: %v",
			handed, deltas["no_egress_port"], deltas)
	}
}

// outcomeDeltas maps each fast-path outcome that changed from before to
// after to how much it grew.
func outcomeDeltas(before, after testbed.Metrics) map[string]float64 {
	d := map[string]float64{}
	for _, o := range offload.Outcomes() {
		if grew := after.Outcome(o.String()) - before.Outcome(o.String()); grew != 0 {
			d[o.String()] = grew
		}
	}
	return d
}
