package snoop

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/offload"
)

type sink struct{ installed map[offload.Channel]bool }

func (s *sink) AddChannel(ch offload.Channel) error    { s.installed[ch] = true; return nil }
func (s *sink) RemoveChannel(ch offload.Channel) error { delete(s.installed, ch); return nil }

var (
	client = netip.MustParseAddrPort("198.51.100.7:40000")
	server = netip.MustParseAddrPort("192.0.2.1:3478")
	relay  = netip.MustParseAddrPort("192.0.2.1:50000")
	peer   = netip.MustParseAddrPort("203.0.113.9:6000")
)

type rig struct {
	t    *testing.T
	l    *Learner
	s    *sink
	time time.Time
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, s: &sink{installed: map[offload.Channel]bool{}}, time: time.Unix(1_800_000_000, 0)}
	r.l = NewLearner(r.s, func() time.Time { return r.time }, t.Logf)
	return r
}

func msg(t *testing.T, id [12]byte, typ stun.MessageType, setters ...stun.Setter) []byte {
	m, err := stun.Build(append([]stun.Setter{stun.NewTransactionIDSetter(id), typ}, setters...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

func xor(t stun.AttrType, ap netip.AddrPort) stun.Setter {
	return setter(func(m *stun.Message) error {
		return stun.XORMappedAddress{IP: ap.Addr().AsSlice(), Port: int(ap.Port())}.AddToAs(m, t)
	})
}

type setter func(*stun.Message) error

func (f setter) AddTo(m *stun.Message) error { return f(m) }

func lifetime(s uint32) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrLifetime, Value: []byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}}
}

// send feeds the learner a frame from src to dst carrying payload.
func (r *rig) send(dir offload.SnoopDirection, src, dst netip.AddrPort, payload []byte) {
	r.l.Handle(dir, frame.UDP{Src: src, Dst: dst, TTL: 64, Payload: payload}.Marshal())
}

func (r *rig) exchange(id byte, method stun.Method, req []stun.Setter, success bool, resp ...stun.Setter) {
	txid := [12]byte{id}
	r.send(offload.SnoopRequest, client, server, msg(r.t, txid, stun.NewType(method, stun.ClassRequest), req...))
	class := stun.ClassSuccessResponse
	if !success {
		class = stun.ClassErrorResponse
		resp = append(resp, stun.ErrorCodeAttribute{Code: stun.CodeForbidden})
	}
	r.send(offload.SnoopResponse, server, client, msg(r.t, txid, stun.NewType(method, class), resp...))
}

func (r *rig) allocate(id byte) {
	r.exchange(id, stun.MethodAllocate, nil, true, xor(stun.AttrXORRelayedAddress, relay), lifetime(600))
}

func (r *rig) bind(id byte, number uint16, success bool) {
	r.exchange(id, stun.MethodChannelBind,
		[]stun.Setter{stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(number >> 8), byte(number), 0, 0}}, xor(stun.AttrXORPeerAddress, peer)},
		success)
}

var want = offload.Channel{Client: client, Server: server, Relay: relay, Peer: peer, Number: 0x4001}

func TestLearnsChannelFromSuccessResponses(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, true)
	if !r.s.installed[want] || len(r.s.installed) != 1 {
		t.Fatalf("installed %v, want %v", r.s.installed, want)
	}
	if a, c := r.l.Counts(); a != 1 || c != 1 {
		t.Fatalf("counts %d allocations %d channels", a, c)
	}
}

func TestRejectedBindIsNotLearned(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, false)
	if len(r.s.installed) != 0 {
		t.Fatal("a channel the server rejected was offloaded")
	}
}

func TestUnsolicitedOrMismatchedResponsesIgnored(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	// A success response nobody asked for.
	r.send(offload.SnoopResponse, server, client, msg(t, [12]byte{9}, stun.NewType(stun.MethodChannelBind, stun.ClassSuccessResponse)))
	// A request answered towards another client port (source port changed).
	txid := [12]byte{3}
	bindReq := msg(t, txid, stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, 0x01, 0, 0}}, xor(stun.AttrXORPeerAddress, peer))
	r.send(offload.SnoopRequest, client, server, bindReq)
	r.send(offload.SnoopResponse, server, netip.MustParseAddrPort("198.51.100.7:40001"),
		msg(t, txid, stun.NewType(stun.MethodChannelBind, stun.ClassSuccessResponse)))
	// A request seen as a response (e.g. looped back) teaches nothing either.
	r.send(offload.SnoopResponse, server, client, bindReq)
	if len(r.s.installed) != 0 {
		t.Fatalf("learned from a response that did not answer the request: %v", r.s.installed)
	}
	// A client on another source port does not inherit the channel.
	r.bind(4, 0x4001, true)
	for ch := range r.s.installed {
		if ch.Client != client {
			t.Fatalf("channel for %v", ch.Client)
		}
	}
}

func TestRefreshZeroAndExpiryRemove(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, true)
	r.exchange(3, stun.MethodRefresh, []stun.Setter{lifetime(0)}, true, lifetime(0))
	if len(r.s.installed) != 0 {
		t.Fatal("Refresh(0) left the channel installed")
	}

	r.allocate(4)
	r.bind(5, 0x4001, true)
	r.time = r.time.Add(9 * time.Minute)
	r.bind(6, 0x4001, true)                                                              // refresh the binding
	r.exchange(7, stun.MethodRefresh, []stun.Setter{lifetime(600)}, true, lifetime(600)) // and the allocation
	r.time = r.time.Add(2 * time.Minute)
	r.l.Sweep()
	if !r.s.installed[want] {
		t.Fatal("a refreshed channel expired")
	}
	r.time = r.time.Add(9 * time.Minute)
	r.l.Sweep()
	if len(r.s.installed) != 0 {
		t.Fatal("channel kept 10 minutes after its last ChannelBind")
	}
}

func TestNewAllocationReplacesOld(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, true)
	r.allocate(3)
	if len(r.s.installed) != 0 {
		t.Fatal("a new allocation on the same 5-tuple kept the old channels")
	}
}

// Captures from different CPUs arrive in any order: a response read before
// its request is matched when the request comes, and one whose request never
// comes is forgotten.
func TestResponseBeforeRequest(t *testing.T) {
	r := newRig(t)
	id := [12]byte{1}
	alloc := msg(t, id, stun.NewType(stun.MethodAllocate, stun.ClassRequest))
	r.send(offload.SnoopResponse, server, client, msg(t, id, stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse), xor(stun.AttrXORRelayedAddress, relay)))
	r.send(offload.SnoopRequest, client, server, alloc)
	r.bind(2, 0x4001, true)
	if !r.s.installed[want] {
		t.Fatal("response read before its request was not matched")
	}

	// An early "success" nobody asked for expires unmatched.
	r2 := newRig(t)
	r2.allocate(1)
	r2.send(offload.SnoopResponse, server, client, msg(t, [12]byte{7}, stun.NewType(stun.MethodChannelBind, stun.ClassSuccessResponse)))
	r2.time = r2.time.Add(3 * time.Second)
	r2.l.Sweep()
	r2.send(offload.SnoopRequest, client, server, msg(t, [12]byte{7}, stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, 0x01, 0, 0}}, xor(stun.AttrXORPeerAddress, peer)))
	if len(r2.s.installed) != 0 {
		t.Fatal("an expired early response was matched to a later request")
	}
}

// A restart: what both the state file and the pinned maps know is taken
// over; a channel only the maps hold is removed; one only the file knows is
// forgotten.
func TestRestoreReconciles(t *testing.T) {
	r := newRig(t)
	path := t.TempDir() + "/state.json"
	if err := r.l.Restore(path, nil); err != nil {
		t.Fatal(err)
	}
	r.allocate(1)
	r.bind(2, 0x4001, true)
	r.bind(3, 0x4002, true) // its peer is the same: pion would refuse; the learner just records
	orphan := offload.Channel{Client: netip.MustParseAddrPort("198.51.100.8:1"), Server: server, Relay: relay, Peer: peer, Number: 0x4005}

	// The restarted process: its engine restored 0x4001 and an orphan, not 0x4002.
	r2 := newRig(t)
	r2.s.installed[want] = true
	r2.s.installed[orphan] = true
	if err := r2.l.Restore(path, []offload.Channel{want, orphan}); err != nil {
		t.Fatal(err)
	}
	if !r2.s.installed[want] || r2.s.installed[orphan] {
		t.Fatalf("after restore installed %v: want only %v", r2.s.installed, want)
	}
	if a, c := r2.l.Counts(); a != 1 || c != 1 {
		t.Fatalf("restored %d allocations %d channels, want 1 and 1", a, c)
	}
	// The taken-over channel still expires and can be removed by Refresh(0).
	r2.exchange(9, stun.MethodRefresh, []stun.Setter{lifetime(0)}, true, lifetime(0))
	if len(r2.s.installed) != 0 {
		t.Fatal("restored channel not removed by Refresh(0)")
	}
}

// Behind a 1:1 NAT the server advertises one address and binds another: the
// fast path must see the wire address, also for a peer at our own advertised
// address (two clients of this server).
func TestRelayMap(t *testing.T) {
	r := newRig(t)
	wire := netip.MustParseAddr("10.0.0.5")
	r.l.MapRelays(map[netip.Addr]netip.Addr{relay.Addr(): wire})
	r.allocate(1)
	r.exchange(2, stun.MethodChannelBind, []stun.Setter{
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, 0x01, 0, 0}},
		xor(stun.AttrXORPeerAddress, netip.AddrPortFrom(relay.Addr(), 50002)),
	}, true)
	want := offload.Channel{Client: client, Server: server, Relay: netip.AddrPortFrom(wire, relay.Port()),
		Peer: netip.AddrPortFrom(wire, 50002), Number: 0x4001}
	if !r.s.installed[want] {
		t.Fatalf("installed %v, want %v", r.s.installed, want)
	}
}
