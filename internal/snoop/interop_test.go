package snoop_test

import (
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// coturn's own client and peer tools through coturn with ebrtc offload.
func TestOffloadCoturnClientTools(t *testing.T) {
	testenv.RequireCommand(t, "turnutils_uclient")
	testenv.RequireCommand(t, "turnutils_peer")
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	startCoturn(t, tb, dir)
	off := startOffload(t, tb, bin)
	peer, err := tb.StartTurnutilsPeer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Stop(2 * time.Second) })

	const clients, messages = 4, 300
	lost, out, err := tb.RunTurnutilsUclient(user, pass, clients, messages, testbed.UclientChannels)
	if err != nil || lost != 0 {
		t.Fatalf("turnutils_uclient: lost %d, %v\n%s", lost, err, out)
	}
	m, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	// Each client has channels to two peer ports; messages are spread over them.
	perDirection := float64(clients * messages)
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		fast := m.Packets("fast", d)
		t.Logf("%s: %v of %v on the fast path", d, fast, perDirection)
		if fast < 0.99*perDirection {
			t.Errorf("%s: %v of %v on the fast path, want >= 99%%", d, fast, perDirection)
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
	c, peer := newFlow(t, tb, ipv4Flow)
	requireFast(t, off, c, peer, 2000)
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
	f := ipv4Flow
	f.user, f.pass = restUser, restPass
	c, peer := newFlow(t, tb, f)
	requireFast(t, off, c, peer, 2000)
	if m, _ := off.Metrics(); m["ebrtc_xdp_channels"] != 1 {
		t.Fatalf("%v channels learned, want 1", m["ebrtc_xdp_channels"])
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
	off := startOffload(t, tb, bin, "--min-port", "32768", "--max-port", "60999") // its relays take the kernel's ephemeral ports
	c, peer := newFlow(t, tb, ipv4Flow)
	requireFast(t, off, c, peer, 2000)
}

// IPv6: coturn listening and relaying on IPv6 too, a client and a peer on IPv6.
func TestOffloadCoturnIPv6(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	startCoturn(t, tb, dir, "listening-ip="+testbed.ServerClientIP6.String(), "relay-ip="+testbed.ServerPeerIP6.String())
	off := startOffload(t, tb, bin)
	c, peer := newFlow(t, tb, flowSpec{server: netip.AddrPortFrom(testbed.ServerClientIP6, 3478), local: testbed.ClientIP6,
		peer: testbed.PeerIP6, family: turn.RequestedAddressFamilyIPv6, user: user, pass: pass})
	if !c.RelayAddr().Addr().Is6() {
		t.Fatalf("relay %v is not IPv6", c.RelayAddr())
	}
	requireFast(t, off, c, peer, 2000)
}

// Where ebrtc turn already runs its fast path, ebrtc offload refuses to start.
func TestOffloadRefusesEbrtcTurnInterface(t *testing.T) {
	tb, bin, _ := setup(t)
	srv, err := tb.StartRelay(bin, testbed.TURNArgs(user+":"+pass)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(5 * time.Second) })
	out, err := tb.Server.Command(bin, "offload", "--iface", testbed.ServerCliIface, "--pin-dir", "", "--control-socket", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already runs an XDP program") {
		t.Fatalf("ebrtc offload on ebrtc turn's interface: %v\n%s", err, out)
	}
}

// Two relay interfaces: peers behind each; the fast path takes each packet's
// egress from the FIB.
func TestOffloadTwoRelayInterfaces(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	peer2ns, peer2IP, iface2, err := tb.AddPeer(2)
	if err != nil {
		t.Fatal(err)
	}
	startCoturn(t, tb, dir)
	off := startOffload(t, tb, bin, "--relay-iface", iface2)
	c, peer1 := newFlow(t, tb, ipv4Flow)
	requireFast(t, off, c, peer1, 2000)

	// The same allocation, a second channel, to a peer behind the second interface.
	peer2, err := testbed.ListenUDP(peer2ns, netip.AddrPortFrom(peer2IP, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer2.Close() })
	if _, err := testbed.Exchange(c.Relay, peer2.LocalAddr(), peer2, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if m, _ := off.Metrics(); m["ebrtc_xdp_channels"] != 2 {
		t.Fatalf("%v channels learned, want 2", m["ebrtc_xdp_channels"])
	}
	requireFast(t, off, c, peer2, 2000)
}
