package turnserver_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The ebrtc binary the tests run is built once, when a test first needs
// it (testbed.SharedEbrtc): fuzz targets and their workers build none.
func TestMain(m *testing.M) { os.Exit(testbed.RunTests(m)) }

const (
	user = "alice"
	pass = "s3cret"
)

var (
	server4 = netip.MustParseAddrPort("10.201.1.1:3478")
	server6 = netip.MustParseAddrPort("[fd00:201:1::1]:3478")
)

func newTestbed(t *testing.T) *testbed.Testbed { return newTestbedWith(t, testbed.Options{}) }

func newTestbedWith(t *testing.T, opts testbed.Options) *testbed.Testbed {
	t.Helper()
	return testbed.ForTest(t, opts)
}

func startRelay(t *testing.T, tb *testbed.Testbed, extra ...string) *testbed.Relay {
	t.Helper()
	r, err := tb.StartRelay(testbed.SharedEbrtc(t), append(testbed.TURNArgs(user+":"+pass), extra...)...)
	return stopAtCleanup(t, r, err)
}

// newClient allocates a relay with pion's client; closed at the end of the test.
func newClient(t *testing.T, tb *testbed.Testbed, family turn.RequestedAddressFamily) *testbed.TURNClient {
	t.Helper()
	return newClientOver(t, tb, testbed.ClientOptions{Server: server4, Family: family})
}

func newClientOver(t *testing.T, tb *testbed.Testbed, o testbed.ClientOptions) *testbed.TURNClient {
	t.Helper()
	o.Realm = "ebrtc.test"
	if !o.Local.IsValid() {
		o.Local = testbed.ClientIP4
		if o.Server.Addr().Is6() {
			o.Local = testbed.ClientIP6
		}
	}
	if o.User == "" {
		o.User, o.Pass = user, pass
	}
	c, err := testbed.NewTURNClient(tb.Client, o)
	if err != nil {
		t.Fatalf("TURN client over %q: %v", o.Transport, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newPeer opens a peer socket in the peer namespace; closed at the end of the test.
func newPeer(t *testing.T, tb *testbed.Testbed, ip netip.Addr) *net.UDPConn {
	t.Helper()
	p, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(ip, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func metrics(t *testing.T, r *testbed.Relay) testbed.Metrics {
	t.Helper()
	m, err := r.Metrics()
	if err != nil {
		t.Fatalf("metrics: %v\n%s", err, r.Output())
	}
	return m
}

// waitMetric polls until cond holds on the relay's metrics (bounded).
func waitMetric(t *testing.T, r *testbed.Relay, what string, cond func(testbed.Metrics) bool) testbed.Metrics {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := metrics(t, r)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; metrics: %v\n%s", what, m, r.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bindChannel sends until pion's client has bound a channel and the relay
// has put it in the fast path.
func bindChannel(t *testing.T, r *testbed.Relay, c *testbed.TURNClient, peer net.PacketConn, channels float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Relay.WriteTo([]byte("bind-please-0123"), peer.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		if metrics(t, r)["ebrtc_xdp_channels"] >= channels {
			drain(peer)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("channel never reached the fast path\n%s", r.Output())
}

// streamingRelay is a relay (fast path "xdp" or "off", plus extra flags)
// with a pion client and a peer, the channel already in the fast path.
func streamingRelay(t *testing.T, mode string, extra ...string) (*testbed.Testbed, *testbed.Relay, *testbed.TURNClient, *net.UDPConn) {
	t.Helper()
	return streamingRelayIn(t, newTestbed(t), mode, extra...)
}

func streamingRelayIn(t *testing.T, tb *testbed.Testbed, mode string, extra ...string) (*testbed.Testbed, *testbed.Relay, *testbed.TURNClient, *net.UDPConn) {
	t.Helper()
	r := startRelay(t, tb, append([]string{"--offload", mode}, extra...)...)
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	if mode == "xdp" {
		bindChannel(t, r, c, peer, 1)
	}
	return tb, r, c, peer
}

func drain(c net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := c.ReadFrom(buf); err != nil {
			_ = c.SetReadDeadline(time.Time{})
			return
		}
	}
}

func fastShare(before, after testbed.Metrics, direction string) (fast, slow float64) {
	return after.Packets("fast", direction) - before.Packets("fast", direction),
		after.Packets("slow", direction) - before.Packets("slow", direction)
}

func requireExchange(t *testing.T, what string, res testbed.Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.Lost() != 0 || res.Corrupt != 0 || res.Duplicate != 0 {
		t.Fatalf("%s: %v", what, res)
	}
}

const packets = 2000

var leftRE = regexp.MustCompile(`left the fast path: to peer (\d+) packets \d+ bytes, to client (\d+) packets`)

// The address families pion's client can ask for. An IPv6 client with an
// IPv4 relay is covered by the BPF tests only: pion's client sends
// REQUESTED-ADDRESS-FAMILY only for IPv6, and pion's server then follows the
// listener's family.
var clientFamilies = []struct {
	name   string
	server netip.AddrPort
	family turn.RequestedAddressFamily
	peer   netip.Addr
}{
	{"ipv4", server4, turn.RequestedAddressFamilyIPv4, testbed.PeerIP4},
	{"ipv4-client-ipv6-peer", server4, turn.RequestedAddressFamilyIPv6, testbed.PeerIP6},
	{"ipv6", server6, turn.RequestedAddressFamilyIPv6, testbed.PeerIP6},
}

func TestTURNFastPathEndToEnd(t *testing.T) {
	for _, tc := range clientFamilies {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTestbed(t)
			r := startRelay(t, tb)
			requireHooks(t, r, "xdp+tc") // the testbed's far ends run XDP: auto picks it
			c := newClientOver(t, tb, testbed.ClientOptions{Server: tc.server, Family: tc.family})
			peer := newPeer(t, tb, tc.peer)
			requireFastBothWays(t, r, c, peer)

			// Refresh with lifetime 0: the maps empty and nothing is relayed for it.
			relayAddr := c.RelayAddr()
			c.Close()
			gone := waitMetric(t, r, "allocation and channel removal", func(m testbed.Metrics) bool {
				return m["ebrtc_xdp_channels"] == 0 && m["ebrtc_turn_allocations"] == 0
			})
			if _, err := peer.WriteTo([]byte("after-close-0123"), net.UDPAddrFromAddrPort(relayAddr)); err != nil {
				t.Fatal(err)
			}
			late := waitMetric(t, r, "the late datagram to be seen", func(m testbed.Metrics) bool {
				return m.Outcome("unknown_peer") > gone.Outcome("unknown_peer")
			})
			if f := late.Packets("fast", "peer_to_client") - gone.Packets("fast", "peer_to_client"); f != 0 {
				t.Errorf("%v packets relayed on the fast path after the allocation was released", f)
			}
			// The server read the channel's own BPF counters when it removed it.
			m := leftRE.FindStringSubmatch(r.Output())
			if m == nil {
				t.Fatalf("no per-channel report in the log:\n%s", r.Output())
			}
			if toPeer, _ := strconv.Atoi(m[1]); toPeer < packets {
				t.Errorf("per-channel report: %s packets to the peer, want >= %d", m[1], packets)
			}
			if toClient, _ := strconv.Atoi(m[2]); toClient < packets {
				t.Errorf("per-channel report: %s packets to the client, want >= %d", m[2], packets)
			}
		})
	}
}

// requireFastBothWays binds a channel, then relays 2000 datagrams each way
// without loss, at least 99% of them on the fast path in each direction.
func requireFastBothWays(t *testing.T, r *testbed.Relay, c *testbed.TURNClient, peer *net.UDPConn) {
	t.Helper()
	bindChannel(t, r, c, peer, 1)
	before := metrics(t, r)
	res, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, packets, 200)
	requireExchange(t, "client to peer", res, err)
	res, err = testbed.Exchange(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, packets, 1200)
	requireExchange(t, "peer to client", res, err)
	after := metrics(t, r)
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		fast, slow := fastShare(before, after, dir)
		if fast+slow < packets || fast/(fast+slow) < 0.99 {
			t.Errorf("%s: fast %v slow %v: want >= 99%% of %d on the fast path", dir, fast, slow, packets)
		}
	}
}

// Two clients of the relay talking through each other's relay address, as
// two relay-only browsers do: both legs stay in XDP.
func TestTURNHairpin(t *testing.T) {
	tb := newTestbed(t)
	requireHairpin(t, tb, startRelay(t, tb))
}

// requireHairpin: two pion clients with channels to each other's relay
// address exchange 2x2000 datagrams without loss, at least 99% in fast_hairpin.
func requireHairpin(t *testing.T, tb *testbed.Testbed, r *testbed.Relay) {
	t.Helper()
	a := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	b := newClient(t, tb, turn.RequestedAddressFamilyIPv4)

	// Each binds a channel to the other's relay address.
	aTo, bTo := net.UDPAddrFromAddrPort(b.RelayAddr()), net.UDPAddrFromAddrPort(a.RelayAddr())
	deadline := time.Now().Add(10 * time.Second)
	for metrics(t, r)["ebrtc_xdp_channels"] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("channels not offloaded\n%s", r.Output())
		}
		_, _ = a.Relay.WriteTo([]byte("hello-from-a-0123"), aTo)
		_, _ = b.Relay.WriteTo([]byte("hello-from-b-0123"), bTo)
		time.Sleep(100 * time.Millisecond)
	}
	drain(a.Relay)
	drain(b.Relay)

	before := metrics(t, r)
	res, err := testbed.Exchange(a.Relay, aTo, b.Relay, packets, 300)
	requireExchange(t, "a to b", res, err)
	res, err = testbed.Exchange(b.Relay, bTo, a.Relay, packets, 300)
	requireExchange(t, "b to a", res, err)
	after := metrics(t, r)
	hairpin := after.Outcome("fast_hairpin") - before.Outcome("fast_hairpin")
	if hairpin < 0.99*2*packets {
		t.Errorf("hairpin on the fast path: %v of %d", hairpin, 2*packets)
	}
}

// With the fast path off, the same traffic is relayed by user space.
func TestTURNOffloadOff(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--offload", "off")
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	// A functional check at a media-like rate; the user-space relay's limits are for benchmarks.
	res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 500, 200, 10000)
	requireExchange(t, "client to peer", res, err)
	m := metrics(t, r)
	if m.Packets("fast", "client_to_peer") != 0 || m.Packets("slow", "client_to_peer") < 500 {
		t.Errorf("offload off: fast %v slow %v", m.Packets("fast", "client_to_peer"), m.Packets("slow", "client_to_peer"))
	}
}

// Peers in refused ranges never get a channel, on either path.
func TestTURNRefusesDeniedPeer(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--deny-peer", "10.201.2.2/32")
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	for range 20 {
		_, _ = c.Relay.WriteTo([]byte("must-not-arrive-0"), peer.LocalAddr())
		time.Sleep(20 * time.Millisecond)
	}
	_ = peer.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, from, err := peer.ReadFrom(make([]byte, 64)); err == nil {
		t.Fatalf("denied peer received %d bytes from %v", n, from)
	}
	if m := metrics(t, r); m["ebrtc_xdp_channels"] != 0 {
		t.Fatalf("a channel to a denied peer reached the fast path")
	}
}

// A channel the client stops refreshing expires: its map entries go and
// nothing more is relayed for it, while the allocation itself lives on.
func TestTURNChannelExpiry(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--channel-lifetime", "2s", "--permission-lifetime", "2s")
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	bindChannel(t, r, c, peer, 1)

	// pion's client refreshes bindings after minutes; the server lifetime is 2s.
	expired := waitMetric(t, r, "channel expiry", func(m testbed.Metrics) bool {
		return m["ebrtc_xdp_channels"] == 0 && m["ebrtc_turn_channels"] == 0
	})
	if expired["ebrtc_turn_allocations"] != 1 {
		t.Fatalf("allocation gone too: %v", expired["ebrtc_turn_allocations"])
	}
	for range 10 {
		if _, err := peer.WriteTo([]byte("after-expiry-0123"), net.UDPAddrFromAddrPort(c.RelayAddr())); err != nil {
			t.Fatal(err)
		}
	}
	late := waitMetric(t, r, "late datagrams to be seen", func(m testbed.Metrics) bool {
		return m.Outcome("unknown_peer")-expired.Outcome("unknown_peer") >= 10
	})
	if n := late.Packets("fast", "peer_to_client") - expired.Packets("fast", "peer_to_client"); n != 0 {
		t.Fatalf("%v datagrams relayed on the fast path after expiry", n)
	}
	_ = c.Relay.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, from, err := c.Relay.ReadFrom(make([]byte, 64)); err == nil {
		t.Fatalf("client received a datagram from %v after its channel and permission expired", from)
	}
}

// With --rx afxdp (and the fast path off) the listeners receive through
// AF_XDP: the client's ChannelData reaches the server through the XDP
// classifier and its AF_XDP socket, and is relayed as with kernel sockets.
func TestTURNReceiveAFXDP(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--offload", "off", "--rx", "afxdp", "--udp-threads", "2")
	for _, family := range []turn.RequestedAddressFamily{turn.RequestedAddressFamilyIPv4, turn.RequestedAddressFamilyIPv6} {
		server, peerIP := server4, testbed.PeerIP4
		if family == turn.RequestedAddressFamilyIPv6 {
			server, peerIP = server6, testbed.PeerIP6
		}
		c := newClientOver(t, tb, testbed.ClientOptions{Server: server, Family: family})
		peer := newPeer(t, tb, peerIP)
		res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 500, 200, 10000)
		requireExchange(t, "client to peer", res, err)
	}
	m := metrics(t, r)
	xdp, kernel, partial := m.AFXDPPaths() // the kernel socket's only: partial-looking checksums
	if xdp+kernel < 1000 || kernel != partial {
		t.Errorf("listener datagrams via AF_XDP %v and the kernel socket %v (want at least 1000, the kernel's only the %v partial-looking)", xdp, kernel, partial)
	}
}

// With --log-format json every log line is a JSON object (pion's lines
// included, with their scope); at the default level a flood of datagrams
// the server refuses (garbage to the listener, a peer without permission
// to a relay address) logs nothing per datagram.
func TestLogs(t *testing.T) {
	for _, level := range []string{"debug", "info"} {
		t.Run(level, func(t *testing.T) {
			tb := newTestbed(t)
			r := startRelay(t, tb, "--offload", "off", "--log-format", "json", "--log-level", level)
			c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
			before := strings.Count(r.Output(), "\n")
			s, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			peer := newPeer(t, tb, testbed.PeerIP4)
			for i := range 500 {
				_, _ = s.WriteToUDPAddrPort([]byte("not a TURN message at all"), server4)
				_, _ = peer.WriteToUDPAddrPort([]byte("no permission"), c.RelayAddr())
				if i%50 == 49 {
					time.Sleep(5 * time.Millisecond)
				}
			}
			time.Sleep(500 * time.Millisecond)
			out := r.Output()
			var jsonLines int
			for _, line := range strings.Split(out, "\n") {
				if !strings.HasPrefix(line, "{") {
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
					t.Fatalf("not a JSON log record: %q (%v)", line, err)
				}
				jsonLines++
			}
			added := strings.Count(out, "\n") - before
			t.Logf("level %s: %d JSON lines, %d lines during the flood of 1,000 refused datagrams", level, jsonLines, added)
			if level == "debug" && jsonLines == 0 {
				t.Errorf("debug: no JSON lines")
			}
			if level == "info" && added > 10 {
				t.Errorf("info: %d lines logged during the flood, want none per datagram:\n%s", added, out)
			}
		})
	}
}
