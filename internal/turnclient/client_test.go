package turnclient_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/turnclient"
	"github.com/ebrtc/ebrtc/internal/turnserver"
)

// Against a real server (ebrtc turn in user space on loopback): allocate,
// bind, relay ChannelData both ways, release; wrong credentials are refused.
// The host is never a peer, but another allocation's relay address is (the
// hairpin), so the peer is a second client.
func TestClientAgainstServer(t *testing.T) {
	s, err := turnserver.Load([]string{
		"--listen", "udp://127.0.0.1:34790", "--relay-ip", "127.0.0.1",
		"--user", "alice:pw", "--offload", "off", "--udp-threads", "1", "--log-level", "error",
		"--min-port", "41000", "--max-port", "41999",
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	srv, err := turnserver.Start(s)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	server := netip.MustParseAddrPort("127.0.0.1:34790")
	conn, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer conn.Close()
	peerConn, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer peerConn.Close()

	if _, err := turnclient.Allocate(conn, server, "alice", "wrong", false); err == nil {
		t.Fatal("allocation with a wrong password succeeded")
	}
	c, err := turnclient.Allocate(conn, server, "alice", "pw", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.Addr() != netip.MustParseAddr("127.0.0.1") || c.Relay.Port() < 41000 || c.Relay.Port() > 41999 {
		t.Fatalf("relay %v outside the configured address and ports", c.Relay)
	}
	peer, err := turnclient.Allocate(peerConn, server, "alice", "pw", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ChannelBind(peer.Relay, 0x4001); err != nil {
		t.Fatal(err)
	}
	if err := peer.ChannelBind(c.Relay, 0x4002); err != nil {
		t.Fatal(err)
	}
	expect := func(conn *net.UDPConn, number uint16, data string) {
		t.Helper()
		buf := make([]byte, 64)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := conn.ReadFrom(buf)
		if err != nil || n < 4+len(data) || buf[0] != byte(number>>8) || buf[1] != byte(number) || string(buf[4:4+len(data)]) != data {
			t.Fatalf("got % x, %v; want ChannelData %#x %q", buf[:n], err, number, data)
		}
	}
	if err := c.SendChannelData(0x4001, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	expect(peerConn, 0x4002, "hello")
	if err := peer.SendChannelData(0x4002, []byte("back")); err != nil {
		t.Fatal(err)
	}
	expect(conn, 0x4001, "back")
	if err := c.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
}
