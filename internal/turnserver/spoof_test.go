package turnserver_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// The spoofing matrix on the real kernel: crafted frames from the client
// and peer links, each sent to a server with the fast path and to one
// without it. The fast path must never deliver what the kernel path drops
// (and need not deliver more than it).
func TestSpoofingMatrix(t *testing.T) {
	results := map[string]map[string]int{}
	outcomes := map[string]float64{}
	for _, mode := range []string{"off", "xdp"} {
		results[mode] = runSpoofCases(t, mode, outcomes)
	}
	for name, off := range results["off"] {
		xdp := results["xdp"][name]
		t.Logf("%-40s kernel path delivered %d, fast path %d", name, off, xdp)
		if xdp > off {
			t.Errorf("%s: the fast path delivered %d spoofed datagrams, the kernel path %d", name, xdp, off)
		}
	}
	for _, name := range []string{"own relay as source v4", "own relay as source v6", "peer from the client side (rp_filter 1)",
		"client from the peer side (rp_filter 1)"} {
		if results["off"][name] != 0 {
			t.Errorf("%s: the kernel path delivered %d: the case does not test what it says", name, results["off"][name])
		}
	}
	// With loose reverse-path filtering the kernel accepts the datagram, and
	// the fast path hands it over rather than drop it (no black hole).
	if n := results["xdp"]["peer from the client side (rp_filter 0)"]; n == 0 {
		t.Error("rp_filter 0: the kernel path delivers, the fast path setup lost it")
	}
	for _, o := range []string{"martian_source", "reverse_path"} {
		if outcomes[o] == 0 {
			t.Errorf("XDP outcome %s never counted", o)
		}
	}
}

const spoofTries = 20

func runSpoofCases(t *testing.T, mode string, outcomes map[string]float64) map[string]int {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--offload", mode)
	peer := newPeer(t, tb, testbed.PeerIP4)

	// Two hairpinned clients per family, and one with a channel to the peer.
	a4, d4 := minimalClient(t, tb, false), minimalClient(t, tb, false)
	a6, d6 := minimalClient(t, tb, true), minimalClient(t, tb, true)
	c := minimalClient(t, tb, false)
	bindPair(t, a4, d4)
	bindPair(t, a6, d6)
	testenv.Must(t, c.ChannelBind(peerAddr(peer), 0x4001))
	waitRelayed(t, func() error { return c.SendChannelData(0x4001, []byte("hello-peer")) }, peer)
	if mode == "xdp" {
		waitMetric(t, r, "five channels in the fast path", func(m testbed.Metrics) bool { return m["ebrtc_xdp_channels"] >= 5 })
	}

	got := map[string]int{}
	inject := func(name string, ns *netns.NS, ifname, serverIf string, u frame.UDP, recv net.PacketConn, marker []byte) {
		for range spoofTries {
			if err := testbed.Inject(ns, ifname, tb.Server, serverIf, u); err != nil {
				t.Fatal(err)
			}
		}
		got[name] = countMarked(recv, marker)
	}
	marker := []byte("spoofed-datagram")
	// From the peer link, as client a's relay address towards client d's: a
	// frame with our own address as its source.
	inject("own relay as source v4", tb.Peer, testbed.PeerIface, testbed.ServerPeerIface,
		frame.UDP{Src: a4.Relay, Dst: d4.Relay, Payload: marker}, d4.conn, marker)
	inject("own relay as source v6", tb.Peer, testbed.PeerIface, testbed.ServerPeerIface,
		frame.UDP{Src: a6.Relay, Dst: d6.Relay, Payload: marker}, d6.conn, marker)

	for _, rp := range []string{"1", "0"} {
		setRPFilter(t, tb.Server, rp)
		// A bound peer's address, arriving on the client link.
		inject("peer from the client side (rp_filter "+rp+")", tb.Client, testbed.ClientIface, testbed.ServerCliIface,
			frame.UDP{Src: peerAddr(peer), Dst: c.Relay, Payload: marker}, c.conn, marker)
		// A client's 5-tuple and channel, arriving on the peer link.
		inject("client from the peer side (rp_filter "+rp+")", tb.Peer, testbed.PeerIface, testbed.ServerPeerIface,
			frame.UDP{Src: c.local(), Dst: server4, Payload: turnclient.ChannelData(make([]byte, 4+len(marker)), 0x4001, marker)},
			peer, marker)
	}
	// Another client's channel number from a client of the server's own:
	// the channel belongs to c's 5-tuple, not d4's.
	for range spoofTries {
		testenv.Must(t, d4.SendChannelData(0x4001, marker))
	}
	got["other client's channel"] = countMarked(peer, marker)

	m := metrics(t, r)
	if m["ebrtc_turn_source_guard_active"] != 1 || m["ebrtc_turn_source_guard_dropped_total"] < spoofTries {
		t.Errorf("%s: source guard active %v, dropped %v: want the IPv6 frames from our own address dropped by it",
			mode, m["ebrtc_turn_source_guard_active"], m["ebrtc_turn_source_guard_dropped_total"])
	}
	for _, o := range []string{"martian_source", "reverse_path"} {
		outcomes[o] += m.Outcome(o)
	}
	return got
}

// spoofClient is the minimal client with the socket it reads from.
type spoofClient struct {
	*turnclient.Client
	conn *net.UDPConn
}

func (c spoofClient) local() netip.AddrPort { return addrPortOf(c.conn.LocalAddr()) }

func minimalClient(t *testing.T, tb *testbed.Testbed, v6relay bool) spoofClient {
	t.Helper()
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	testenv.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	c, err := turnclient.AllocateWith(conn, server4, turnclient.Options{User: user, Password: pass, V6: v6relay})
	testenv.Must(t, err)
	return spoofClient{Client: c, conn: conn}
}

// bindPair binds channel 0x4000 of each client to the other's relay address
// and waits until data goes through both ways.
func bindPair(t *testing.T, a, b spoofClient) {
	t.Helper()
	testenv.Must(t, a.ChannelBind(b.Relay, 0x4000))
	testenv.Must(t, b.ChannelBind(a.Relay, 0x4000))
	waitRelayed(t, func() error { return a.SendChannelData(0x4000, []byte("hello-b")) }, b.conn)
	waitRelayed(t, func() error { return b.SendChannelData(0x4000, []byte("hello-a")) }, a.conn)
}

// waitRelayed sends until recv gets something (bounded), then drains it.
func waitRelayed(t *testing.T, send func() error, recv net.PacketConn) {
	t.Helper()
	buf := make([]byte, 2048)
	for range 50 {
		testenv.Must(t, send())
		_ = recv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, _, err := recv.ReadFrom(buf); err == nil {
			drain(recv)
			return
		}
	}
	t.Fatal("nothing relayed between two bound endpoints")
}

// countMarked counts datagrams carrying marker that arrive within 300 ms.
func countMarked(c net.PacketConn, marker []byte) int {
	n := 0
	buf := make([]byte, 2048)
	for {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		m, _, err := c.ReadFrom(buf)
		if err != nil {
			_ = c.SetReadDeadline(time.Time{})
			return n
		}
		if bytes.Contains(buf[:m], marker) {
			n++
		}
	}
}

func setRPFilter(t *testing.T, ns *netns.NS, v string) {
	t.Helper()
	for _, conf := range []string{"all", testbed.ServerCliIface, testbed.ServerPeerIface} {
		if _, err := ns.Output("sysctl", "-qw", "net.ipv4.conf."+conf+".rp_filter="+v); err != nil {
			t.Fatal(err)
		}
	}
}

func peerAddr(c *net.UDPConn) netip.AddrPort { return addrPortOf(c.LocalAddr()) }

func addrPortOf(a net.Addr) netip.AddrPort {
	ap := netip.MustParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
