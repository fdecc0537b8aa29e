package agent

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

func addr(c *net.UDPConn) netip.AddrPort {
	return addrport.Unmap(c.LocalAddr().(*net.UDPAddr).AddrPort())
}

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
	return buf[:n], addrport.Unmap(from)
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
	a, err := New(NewICE(ICEConfig{}), r, nil)
	testenv.Must(t, err)
	s := sess
	s.OnBinding = func(b Binding) { bound <- b }
	testenv.Must(t, a.ICE.Add(s))
	testenv.Must(t, a.Handle(check(t, "sfu1:brws", sess.LocalPwd, true), addr(browser), sfu))
	resp, from := read(t, browser)
	m := &stun.Message{Raw: resp}
	if m.Decode() != nil || m.Type != stun.BindingSuccess || from != addr(sfu) {
		t.Fatalf("answer %v from %v", m, from)
	}
	nack, _ := rtcp.Marshal([]rtcp.Packet{&rtcp.TransportLayerNack{SenderSSRC: 2, MediaSSRC: 1, Nacks: []rtcp.NackPair{{PacketID: 5}}}})
	testenv.Must(t, a.Handle(nack, addr(browser), sfu))
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

type dtlsSink struct {
	from netip.AddrPort
	n    int
}

func (d *dtlsSink) Handle(p []byte, from netip.AddrPort) error {
	d.from, d.n = from, d.n+1
	return nil
}

// With encrypted media, DTLS records (first byte 20-63) go to the
// handshakes; what is neither STUN, RTCP nor DTLS is still refused. The
// ICE session an address's checks came from is found by the address
// until its consent lapses or the session goes.
func TestAgentHandsDTLSOn(t *testing.T) {
	sfu, browser := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	now := time.Unix(1000, 0)
	ice := NewICE(ICEConfig{Now: func() time.Time { return now }})
	d := &dtlsSink{}
	a, err := New(ice, &router{}, d)
	testenv.Must(t, err)
	testenv.Must(t, ice.Add(sess))
	if _, ok := ice.SessionAt(addr(browser)); ok {
		t.Fatal("a session for an address before its check")
	}
	testenv.Must(t, a.Handle(check(t, "sfu1:brws", sess.LocalPwd, true), addr(browser), sfu))
	if u, ok := ice.SessionAt(addr(browser)); !ok || u != sess.LocalUfrag {
		t.Fatalf("session at the checked address: %q %v", u, ok)
	}
	for _, first := range []byte{20, 22, 23, 63} {
		testenv.Must(t, a.Handle([]byte{first, 0xfe, 0xfd, 0}, addr(browser), sfu))
	}
	if d.n != 4 || d.from != addr(browser) {
		t.Errorf("DTLS handed on %d times, from %v", d.n, d.from)
	}
	for _, first := range []byte{4, 19, 64, 127} {
		if a.Handle([]byte{first, 1, 2, 3}, addr(browser), sfu) == nil {
			t.Errorf("first byte %d accepted", first)
		}
	}
	now = now.Add(ConsentTimeout)
	ice.Expire()
	if _, ok := ice.SessionAt(addr(browser)); ok {
		t.Error("a session for an address whose consent lapsed")
	}
	testenv.Must(t, a.Handle(check(t, "sfu1:brws", sess.LocalPwd, true), addr(browser), sfu))
	ice.Remove(sess.LocalUfrag)
	if _, ok := ice.SessionAt(addr(browser)); ok {
		t.Error("a session for an address after the session went")
	}
}
