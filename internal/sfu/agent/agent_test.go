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

// On a real socket (loopback): a browser's check is answered from the
// SFU's socket, and a receiver's NACK reaches its sender from it.
func TestAgentServesTheMediaSocket(t *testing.T) {
	sfu, browser, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	bound := make(chan Binding, 4)
	a, err := New(ICEConfig{OnBinding: func(b Binding) { bound <- b }}, FeedbackConfig{}, []*net.UDPConn{sfu})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(sfu, nil) }()
	must(t, a.ICE.Add(sess))
	if _, err := browser.WriteToUDPAddrPort(check(t, "sfu1:brws", sess.LocalPwd, true), addr(sfu)); err != nil {
		t.Fatal(err)
	}
	resp, from := read(t, browser)
	m := &stun.Message{Raw: resp}
	if m.Decode() != nil || m.Type != stun.BindingSuccess || from != addr(sfu) {
		t.Fatalf("answer %v from %v", m, from)
	}
	a.Feedback.SetPath(addr(browser), Path{Sender: addr(sender), Via: addr(sfu)})
	nack, _ := rtcp.Marshal([]rtcp.Packet{&rtcp.TransportLayerNack{SenderSSRC: 2, MediaSSRC: 1, Nacks: []rtcp.NackPair{{PacketID: 5}}}})
	if _, err := browser.WriteToUDPAddrPort(nack, addr(sfu)); err != nil {
		t.Fatal(err)
	}
	got, from := read(t, sender)
	pkts, err := rtcp.Unmarshal(got)
	if err != nil || len(pkts) != 1 || from != addr(sfu) {
		t.Fatalf("sender got %v (%v) from %v", pkts, err, from)
	}
	if b := <-bound; b.Remote != addr(browser) || !b.Nominated || len(bound) != 0 {
		t.Errorf("binding %v, %d more", b, len(bound))
	}
	sfu.Close()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
