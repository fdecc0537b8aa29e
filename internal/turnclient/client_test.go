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
func TestClientAgainstServer(t *testing.T) {
	s, err := turnserver.Load([]string{
		"--listen", "udp://127.0.0.1:34790", "--relay-ip", "127.0.0.1", "--allow-peer", "127.0.0.0/8",
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
	peer, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer peer.Close()

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
	peerAddr := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := c.ChannelBind(peerAddr, 0x4001); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	msg := turnclient.ChannelData(make([]byte, 4+5), 0x4001, []byte("hello"))
	if _, err := conn.WriteTo(msg, net.UDPAddrFromAddrPort(server)); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, _, err := peer.ReadFrom(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("peer got %q, %v", buf[:n], err)
	}
	if _, err := peer.WriteTo([]byte("back"), net.UDPAddrFromAddrPort(c.Relay)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _, err := conn.ReadFrom(buf)
	if err != nil || n < 8 || buf[0] != 0x40 || buf[1] != 0x01 || string(buf[4:8]) != "back" {
		t.Fatalf("client got % x, %v", buf[:n], err)
	}
	if err := c.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
}
