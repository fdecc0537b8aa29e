package dataplane

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// A replica whose send fails (here: port 0, refused at once) costs only
// itself: sendmmsg stops at it, and the replicas after it, other
// receivers', still go.
func TestSendEachGoesPastAFailure(t *testing.T) {
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, out := listen(), listen(), listen()
	c := newMediaConn(out, nil)
	addr := func(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }
	replicas := []afxdp.Message{
		{Buf: []byte("to a"), Addr: addr(a)},
		{Buf: []byte("refused"), Addr: netip.MustParseAddrPort("127.0.0.1:0")},
		{Buf: []byte("to b"), Addr: addr(b)},
	}
	sent := make([]bool, len(replicas))
	var msgs []ipv4.Message
	sendEach(c, replicas, sent, &msgs)
	if !sent[0] || sent[1] || !sent[2] {
		t.Fatalf("sent %v, want [true false true]", sent)
	}
	for _, r := range []*net.UDPConn{a, b} {
		buf := make([]byte, 64)
		_ = r.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := r.Read(buf); err != nil || n != 4 {
			t.Errorf("%v: read %q, %v", r.LocalAddr(), buf[:max(n, 0)], err)
		}
	}
}
