package snoop_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// What coturn refuses is never offloaded, and nothing arriving from the
// network can pose as coturn's answer.
func TestOffloadLearnsOnlyWhatCoturnAccepts(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	denied := netip.MustParseAddrPort("10.201.2.99:5000")
	startCoturn(t, tb, dir, "denied-peer-ip="+denied.Addr().String())
	off := startOffload(t, tb, bin)
	server := netip.AddrPortFrom(testbed.ServerClientIP4, 3478)
	peer := netip.AddrPortFrom(testbed.PeerIP4, 6000)
	channels := func() float64 {
		time.Sleep(300 * time.Millisecond) // captures reach the learner asynchronously
		m, err := off.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		return m["ebrtc_xdp_channels"]
	}
	conn := func() *net.UDPConn {
		c, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	if _, err := turnclient.Allocate(conn(), server, user, "wrong", false); err == nil {
		t.Fatal("coturn accepted a wrong password")
	}
	c1 := conn()
	tc, err := turnclient.Allocate(c1, server, user, pass, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.ChannelBind(peer, 0x3000); err == nil {
		t.Fatal("coturn accepted channel 0x3000")
	}
	if err := tc.ChannelBind(denied, 0x4001); err == nil {
		t.Fatal("coturn accepted a denied peer")
	}
	if n := channels(); n != 0 {
		t.Fatalf("%v channels offloaded from refused requests", n)
	}

	// A forged success response to a real request, sent towards the server
	// (so it arrives at ingress), while coturn answers the request with 403.
	txid := [12]byte{0xeb, 0x27, 1}
	req, _ := stun.Build(stun.NewTransactionIDSetter(txid), stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, 0x02, 0, 0}},
		setter(func(m *stun.Message) error {
			return stun.XORMappedAddress{IP: denied.Addr().AsSlice(), Port: int(denied.Port())}.AddToAs(m, stun.AttrXORPeerAddress)
		}))
	forged, _ := stun.Build(stun.NewTransactionIDSetter(txid), stun.NewType(stun.MethodChannelBind, stun.ClassSuccessResponse))
	for _, m := range [][]byte{req.Raw, forged.Raw} {
		if _, err := c1.WriteTo(m, net.UDPAddrFromAddrPort(server)); err != nil {
			t.Fatal(err)
		}
	}
	if n := channels(); n != 0 {
		t.Fatalf("a forged response taught the snooper %v channels", n)
	}

	// The control: what coturn accepts is learned.
	if err := tc.ChannelBind(peer, 0x4003); err != nil {
		t.Fatal(err)
	}
	if n := channels(); n != 1 {
		t.Fatalf("%v channels after an accepted ChannelBind, want 1", n)
	}
}

type setter func(*stun.Message) error

func (f setter) AddTo(m *stun.Message) error { return f(m) }
