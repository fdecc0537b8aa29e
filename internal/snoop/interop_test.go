package snoop_test

import (
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// startOffload runs ebrtc offload beside the server under test, unpinned.
func startOffload(t *testing.T, tb *testbed.Testbed, bin string) *testbed.Relay {
	t.Helper()
	off, err := tb.StartRelay(bin, "offload", "--iface", testbed.ServerCliIface, "--relay-iface", testbed.ServerPeerIface,
		"--relay-ip", testbed.ServerPeerIP4.String(), "--metrics-listen", testbed.MetricsAddr, "--pin-dir", "", "--control-socket", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Stop(5 * time.Second) })
	return off
}

func setup(t *testing.T) (*testbed.Testbed, string, string) {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	bin, err := testbed.BuildEbrtc(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := testbed.New()
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb, bin, dir
}

var lostRE = regexp.MustCompile(`Total lost packets (\d+) \(`)

// coturn's own client and peer tools through coturn with ebrtc offload.
func TestOffloadCoturnClientTools(t *testing.T) {
	uclient := testenv.RequireCommand(t, "turnutils_uclient")
	peerBin := testenv.RequireCommand(t, "turnutils_peer")
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	coturn, err := tb.StartCoturn(dir, io.Discard, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coturn.Stop(5 * time.Second) })
	off := startOffload(t, tb, bin)
	peer, err := testbed.Start(tb.Peer, io.Discard, peerBin, "-L", testbed.PeerIP4.String(), "-p", "3480")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Stop(2 * time.Second) })
	time.Sleep(200 * time.Millisecond)

	const clients, messages = 4, 300
	out, err := tb.Client.Command("timeout", "90", uclient, "-u", user, "-w", pass, "-e", testbed.PeerIP4.String(), "-r", "3480",
		"-n", "300", "-m", "4", "-l", "170", "-z", "5", "-X", "-c", "-L", testbed.ClientIP4.String(), testbed.ServerClientIP4.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("turnutils_uclient: %v\n%s", err, out)
	}
	if m := lostRE.FindSubmatch(out); m == nil || string(m[1]) != "0" {
		t.Fatalf("turnutils_uclient lost packets:\n%s", out)
	}
	m, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	// 2 channels per client (peer ports 3480 and 3481); the first datagrams
	// of each may pass before the ChannelBind response is learned.
	perDirection := float64(clients * messages * 2 / 2)
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		if fast := m.Packets("fast", d); fast < 0.95*perDirection {
			t.Errorf("%s: %v of %v on the fast path", d, fast, perDirection)
		}
	}
}

// ebrtc offload also learns from ebrtc turn in user space (pion/turn).
func TestOffloadEbrtcTurnUserSpace(t *testing.T) {
	tb, bin, _ := setup(t)
	args := []string{"turn", "--listen", "udp://10.201.1.1:3478", "--relay-ip", testbed.ServerPeerIP4.String(),
		"--realm", "ebrtc.test", "--user", user + ":" + pass, "--offload", "off"}
	for _, p := range testbed.Prefixes {
		args = append(args, "--allow-peer", p)
	}
	srv, err := tb.StartRelay(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(5 * time.Second) })
	off := startOffload(t, tb, bin)
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
		User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	before, _ := off.Metrics()
	res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 2000, 200, 10000)
	if err != nil || res.Lost() != 0 {
		t.Fatalf("%v %v", res, err)
	}
	res, err = testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 2000, 200, 10000)
	if err != nil || res.Lost() != 0 {
		t.Fatalf("%v %v", res, err)
	}
	after, _ := off.Metrics()
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		if fast := after.Packets("fast", d) - before.Packets("fast", d); fast < 0.99*2000 {
			t.Errorf("%s: %v of 2000 on the fast path", d, fast)
		}
	}
}

// coturn with TURN REST API credentials: the snooper never reads
// credentials, so it learns the same way; Refresh(0) takes the channel out.
func TestOffloadCoturnRESTAndRefreshZero(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	const secret = "rest-secret"
	coturn, err := tb.StartCoturnREST(dir, io.Discard, secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coturn.Stop(5 * time.Second) })
	off := startOffload(t, tb, bin)
	restUser, restPass, err := turn.GenerateLongTermTURNRESTCredentials(secret, "bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
		User: restUser, Pass: restPass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
	})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	before, _ := off.Metrics()
	res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 2000, 200, 10000)
	if err != nil || res.Lost() != 0 {
		t.Fatalf("%v %v", res, err)
	}
	after, _ := off.Metrics()
	if fast := after.Packets("fast", "client_to_peer") - before.Packets("fast", "client_to_peer"); fast < 0.99*2000 {
		t.Errorf("REST-authenticated channel: %v of 2000 on the fast path", fast)
	}
	if after["ebrtc_xdp_channels"] != 1 {
		t.Fatalf("%v channels learned, want 1", after["ebrtc_xdp_channels"])
	}

	c.Close() // Refresh with LIFETIME 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := off.Metrics()
		if m["ebrtc_xdp_channels"] == 0 && m["ebrtc_turn_allocations"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Refresh(0): %v channels, %v allocations", m["ebrtc_xdp_channels"], m["ebrtc_turn_allocations"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pion's own example TURN server (examples/turn-server/simple), unmodified:
// a wildcard listener, relays on ephemeral ports.
func TestOffloadPionExampleServer(t *testing.T) {
	tb, bin, dir := setup(t)
	server := filepath.Join(dir, "pion-turn-simple")
	if out, err := exec.Command("go", "build", "-o", server, "github.com/pion/turn/v5/examples/turn-server/simple").CombinedOutput(); err != nil {
		t.Fatalf("build pion's example: %v\n%s", err, out)
	}
	p, err := testbed.Start(tb.Server, io.Discard, server, "-public-ip", testbed.ServerPeerIP4.String(),
		"-users", user+"="+pass, "-realm", "ebrtc.test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for tb.ProbeTURN(user, pass) != nil {
		if time.Now().After(deadline) {
			t.Fatal("pion's example server not answering")
		}
		time.Sleep(100 * time.Millisecond)
	}
	off, err := tb.StartRelay(bin, "offload", "--iface", testbed.ServerCliIface, "--relay-iface", testbed.ServerPeerIface,
		"--min-port", "32768", "--max-port", "60999", // its relays take the kernel's ephemeral ports
		"--metrics-listen", testbed.MetricsAddr, "--pin-dir", "", "--control-socket", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Stop(5 * time.Second) })

	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
		User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	before, _ := off.Metrics()
	for _, ex := range []func() (testbed.Result, error){
		func() (testbed.Result, error) {
			return testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 2000, 200, 10000)
		},
		func() (testbed.Result, error) {
			return testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 2000, 200, 10000)
		},
	} {
		if res, err := ex(); err != nil || res.Lost() != 0 {
			t.Fatalf("%v %v", res, err)
		}
	}
	after, _ := off.Metrics()
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		if fast := after.Packets("fast", d) - before.Packets("fast", d); fast < 0.99*2000 {
			t.Errorf("%s: %v of 2000 on the fast path", d, fast)
		}
	}
}

// IPv6: coturn listening and relaying on IPv6 too, a client and a peer on IPv6.
func TestOffloadCoturnIPv6(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	coturn, err := tb.StartCoturn(dir, io.Discard, user, pass,
		"listening-ip="+testbed.ServerClientIP6.String(), "relay-ip="+testbed.ServerPeerIP6.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coturn.Stop(5 * time.Second) })
	off := startOffload(t, tb, bin)
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP6, 3478), Local: testbed.ClientIP6,
		User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv6,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if !c.RelayAddr().Addr().Is6() {
		t.Fatalf("relay %v is not IPv6", c.RelayAddr())
	}
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP6, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	before, _ := off.Metrics()
	if res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 2000, 200, 10000); err != nil || res.Lost() != 0 {
		t.Fatalf("%v %v", res, err)
	}
	if res, err := testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 2000, 200, 10000); err != nil || res.Lost() != 0 {
		t.Fatalf("%v %v", res, err)
	}
	after, _ := off.Metrics()
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		if fast := after.Packets("fast", d) - before.Packets("fast", d); fast < 0.99*2000 {
			t.Errorf("IPv6 %s: %v of 2000 on the fast path", d, fast)
		}
	}
}
