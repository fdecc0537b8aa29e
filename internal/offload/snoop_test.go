package offload

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

type attrSetter func(*stun.Message) error

func (f attrSetter) AddTo(m *stun.Message) error { return f(m) }

func xorAttr(t stun.AttrType, ap netip.AddrPort) stun.Setter {
	return attrSetter(func(m *stun.Message) error {
		return stun.XORMappedAddress{IP: ap.Addr().AsSlice(), Port: int(ap.Port())}.AddToAs(m, t)
	})
}

func stunMsg(t *testing.T, setters ...stun.Setter) *stun.Message {
	m, err := stun.Build(setters...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// readSnoop returns the next record, or ok false when none comes.
func readSnoop(t *testing.T, r *SnoopReader) (SnoopEvent, bool) {
	r.SetDeadline(time.Now().Add(200 * time.Millisecond))
	ev, err := r.Read()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ev, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return ev, true
}

// The BPF snooper parses TURN control messages built independently (pion/stun).
func TestSnoopParsesControlMessages(t *testing.T) {
	r := newRigWith(t, func(c *Config) { c.Snoop = true })
	reader, err := r.engine.SnoopReader()
	testenv.Must(t, err)
	defer reader.Close()
	client, server := ap("10.10.1.2:40000"), ap("10.10.1.1:3478")
	peer := ap("203.0.113.9:6000")

	// A full ChannelBind request at XDP ingress.
	req := stunMsg(t, stun.TransactionID, stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		stun.NewUsername("alice"), stun.NewRealm("ebrtc.test"), stun.NewNonce("abcdef"),
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, 0x07, 0, 0}},
		xorAttr(stun.AttrXORPeerAddress, peer),
		stun.NewLongTermIntegrity("alice", "ebrtc.test", "pw"), stun.Fingerprint)
	r.expectOutcome(SlowNotChannelData, func() {
		r.run("cli0", r.from("cli0", frame.UDP{Src: client, Dst: server, Payload: req.Raw}))
	})
	ev, ok := readSnoop(t, reader)
	if !ok {
		t.Fatal("no record for a ChannelBind request")
	}
	if ev.Direction != SnoopRequest || ev.Client != client || ev.Server != server || ev.TransactionID != req.TransactionID ||
		ev.Type != req.Type.Value() || !ev.HasChannel || ev.Channel != 0x4007 || !ev.HasAddress || ev.Address != peer || ev.HasLifetime {
		t.Fatalf("request parsed as %+v", ev)
	}

	// An Allocate success response at TC egress, with an IPv6 relayed address
	// beside an XOR-MAPPED-ADDRESS (not to be taken for it) and a lifetime.
	relayed := ap("[2001:db8::7]:50123")
	res := stunMsg(t, stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse),
		xorAttr(stun.AttrXORRelayedAddress, relayed), xorAttr(stun.AttrXORMappedAddress, client),
		stun.RawAttribute{Type: stun.AttrLifetime, Value: []byte{0, 0, 0x02, 0x58}},
		stun.NewSoftware("coturn"), stun.NewLongTermIntegrity("alice", "ebrtc.test", "pw"), stun.Fingerprint)
	r.runEgress(r.toward("cli0", frame.UDP{Src: server, Dst: client, TTL: 64, Payload: res.Raw}))
	ev, ok = readSnoop(t, reader)
	if !ok {
		t.Fatal("no record for an Allocate response")
	}
	if ev.Direction != SnoopResponse || ev.Client != client || ev.Server != server || ev.TransactionID != res.TransactionID ||
		!ev.HasAddress || ev.Address != relayed || !ev.HasLifetime || ev.Lifetime != 600 || ev.HasChannel {
		t.Fatalf("response parsed as %+v", ev)
	}

	// Malformed or over the bound: not learned.
	bad := stunMsg(t, stun.TransactionID, stun.NewType(stun.MethodChannelBind, stun.ClassRequest), stun.NewUsername("alice"))
	bad.Raw[20+3] += 8 // USERNAME claims more bytes than the message has
	many := []stun.Setter{stun.TransactionID, stun.NewType(stun.MethodChannelBind, stun.ClassRequest)}
	for range 17 {
		many = append(many, stun.NewSoftware("x"))
	}
	for _, raw := range [][]byte{bad.Raw, stunMsg(t, many...).Raw} {
		r.run("cli0", r.from("cli0", frame.UDP{Src: client, Dst: server, Payload: raw}))
		if ev, ok := readSnoop(t, reader); ok {
			t.Fatalf("a malformed message was learned: %+v", ev)
		}
	}
}

// runEgress feeds a frame to the TC egress snooper.
func (r *rig) runEgress(in []byte) {
	r.t.Helper()
	testenv.Must(r.t, r.ns.Do(func() error {
		_, err := r.engine.snoop.Run(&ebpf.RunOptions{Data: in})
		return err
	}))
}
