package agent

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func addr(c *net.UDPConn) netip.AddrPort { return unmap(c.LocalAddr().(*net.UDPAddr).AddrPort()) }

func read(t *testing.T, c *net.UDPConn) ([]byte, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 1500)
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n], unmap(from)
}

// router records the RTCP routed to it.
type router struct {
	from netip.AddrPort
	pkts []rtcp.Packet
}

func (r *router) Feedback(from netip.AddrPort, pkts []rtcp.Packet) error {
	r.from, r.pkts = from, pkts
	return nil
}

// On a real socket (loopback): a browser's check is answered from the
// SFU's socket and its binding reported; a receiver's RTCP goes to the
// router, parsed; anything else is refused.
func TestAgentHandlesTheMediaSocket(t *testing.T) {
	sfu, browser := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	bound := make(chan Binding, 4)
	r := &router{}
	a, err := New(NewICE(ICEConfig{}), r)
	must(t, err)
	s := sess
	s.OnBinding = func(b Binding) { bound <- b }
	must(t, a.ICE.Add(s))
	must(t, a.Handle(check(t, "sfu1:brws", sess.LocalPwd, true), addr(browser), sfu))
	resp, from := read(t, browser)
	m := &stun.Message{Raw: resp}
	if m.Decode() != nil || m.Type != stun.BindingSuccess || from != addr(sfu) {
		t.Fatalf("answer %v from %v", m, from)
	}
	nack, _ := rtcp.Marshal([]rtcp.Packet{&rtcp.TransportLayerNack{SenderSSRC: 2, MediaSSRC: 1, Nacks: []rtcp.NackPair{{PacketID: 5}}}})
	must(t, a.Handle(nack, addr(browser), sfu))
	if r.from != addr(browser) || len(r.pkts) != 1 {
		t.Fatalf("routed %v from %v", r.pkts, r.from)
	}
	if n, ok := r.pkts[0].(*rtcp.TransportLayerNack); !ok || n.Nacks[0].PacketID != 5 {
		t.Errorf("routed %v", r.pkts[0])
	}
	if a.Handle([]byte{0x81, 205, 0}, addr(browser), sfu) == nil || a.Handle([]byte{22, 3, 1}, addr(browser), sfu) == nil {
		t.Error("garbage RTCP or DTLS accepted")
	}
	if b := <-bound; b.Remote != addr(browser) || !b.Nominated || len(bound) != 0 {
		t.Errorf("binding %v, %d more", b, len(bound))
	}
}
