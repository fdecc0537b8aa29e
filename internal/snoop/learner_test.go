package snoop

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/pion/stun/v4"

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
	want   = offload.Channel{Client: client, Server: server, Relay: relay, Peer: peer, Number: 0x4001}
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

// An event as the BPF snooper reports it; options add the parsed attributes.
type opt func(*offload.SnoopEvent)

func withChannel(n uint16) opt {
	return func(e *offload.SnoopEvent) { e.Channel, e.HasChannel = n, true }
}
func withAddress(ap netip.AddrPort) opt {
	return func(e *offload.SnoopEvent) { e.Address, e.HasAddress = ap, true }
}
func withLifetime(s uint32) opt {
	return func(e *offload.SnoopEvent) { e.Lifetime, e.HasLifetime = s, true }
}
func toClient(ap netip.AddrPort) opt { return func(e *offload.SnoopEvent) { e.Client = ap } }

func event(dir offload.SnoopDirection, id byte, method stun.Method, class stun.MessageClass, opts ...opt) offload.SnoopEvent {
	e := offload.SnoopEvent{Direction: dir, Client: client, Server: server, Type: stun.NewType(method, class).Value(),
		TransactionID: [12]byte{id}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func (r *rig) exchange(id byte, method stun.Method, req []opt, success bool, resp ...opt) {
	r.l.Handle(event(offload.SnoopRequest, id, method, stun.ClassRequest, req...))
	class := stun.ClassSuccessResponse
	if !success {
		class = stun.ClassErrorResponse
	}
	r.l.Handle(event(offload.SnoopResponse, id, method, class, resp...))
}

func (r *rig) allocate(id byte) {
	r.exchange(id, stun.MethodAllocate, nil, true, withAddress(relay), withLifetime(600))
}

func (r *rig) bind(id byte, number uint16, success bool) {
	r.exchange(id, stun.MethodChannelBind, []opt{withChannel(number), withAddress(peer)}, success)
}

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
	r.l.Handle(event(offload.SnoopResponse, 9, stun.MethodChannelBind, stun.ClassSuccessResponse))
	// A request answered towards another client port (source port changed).
	r.l.Handle(event(offload.SnoopRequest, 3, stun.MethodChannelBind, stun.ClassRequest, withChannel(0x4001), withAddress(peer)))
	r.l.Handle(event(offload.SnoopResponse, 3, stun.MethodChannelBind, stun.ClassSuccessResponse, toClient(netip.MustParseAddrPort("198.51.100.7:40001"))))
	// A request seen as a response teaches nothing either.
	r.l.Handle(event(offload.SnoopResponse, 4, stun.MethodChannelBind, stun.ClassRequest, withChannel(0x4001), withAddress(peer)))
	// A ChannelBind request without its attributes is not learned.
	r.exchange(5, stun.MethodChannelBind, []opt{withChannel(0x4001)}, true)
	if len(r.s.installed) != 0 {
		t.Fatalf("learned from a response that did not answer the request: %v", r.s.installed)
	}
}

func TestRefreshZeroAndExpiryRemove(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, true)
	r.exchange(3, stun.MethodRefresh, []opt{withLifetime(0)}, true, withLifetime(0))
	if len(r.s.installed) != 0 {
		t.Fatal("Refresh(0) left the channel installed")
	}

	r.allocate(4)
	r.bind(5, 0x4001, true)
	r.time = r.time.Add(9 * time.Minute)
	r.bind(6, 0x4001, true)                                                              // refresh the binding
	r.exchange(7, stun.MethodRefresh, []opt{withLifetime(600)}, true, withLifetime(600)) // and the allocation
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

// Events from the two hooks may arrive in either order: a response read
// before its request is matched when the request comes, and one whose
// request never comes is forgotten.
func TestResponseBeforeRequest(t *testing.T) {
	r := newRig(t)
	r.l.Handle(event(offload.SnoopResponse, 1, stun.MethodAllocate, stun.ClassSuccessResponse, withAddress(relay)))
	r.l.Handle(event(offload.SnoopRequest, 1, stun.MethodAllocate, stun.ClassRequest))
	r.bind(2, 0x4001, true)
	if !r.s.installed[want] {
		t.Fatal("response read before its request was not matched")
	}

	r2 := newRig(t)
	r2.allocate(1)
	r2.l.Handle(event(offload.SnoopResponse, 7, stun.MethodChannelBind, stun.ClassSuccessResponse))
	r2.time = r2.time.Add(3 * time.Second)
	r2.l.Sweep()
	r2.l.Handle(event(offload.SnoopRequest, 7, stun.MethodChannelBind, stun.ClassRequest, withChannel(0x4001), withAddress(peer)))
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
	// A peer has one channel per allocation (RFC 8656 section 12): another peer.
	r.exchange(3, stun.MethodChannelBind, []opt{withChannel(0x4002), withAddress(netip.MustParseAddrPort("203.0.113.10:6000"))}, true)
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
	r2.exchange(9, stun.MethodRefresh, []opt{withLifetime(0)}, true, withLifetime(0))
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
	r.exchange(2, stun.MethodChannelBind, []opt{withChannel(0x4001), withAddress(netip.AddrPortFrom(relay.Addr(), 50002))}, true)
	w := offload.Channel{Client: client, Server: server, Relay: netip.AddrPortFrom(wire, relay.Port()),
		Peer: netip.AddrPortFrom(wire, 50002), Number: 0x4001}
	if !r.s.installed[w] {
		t.Fatalf("installed %v, want %v", r.s.installed, w)
	}
}

// Found by FuzzLearner: a binding the server accepted that replaces another
// (the number to another peer, or the peer to another number) takes the old
// one out of the fast path; numbers outside 0x4000-0x7FFF are never learned.
func TestRebindingReplacesTheOldChannel(t *testing.T) {
	r := newRig(t)
	r.allocate(1)
	r.bind(2, 0x4001, true)
	other := netip.MustParseAddrPort("203.0.113.10:6000")
	r.exchange(3, stun.MethodChannelBind, []opt{withChannel(0x4001), withAddress(other)}, true)
	moved := want
	moved.Peer = other
	if len(r.s.installed) != 1 || !r.s.installed[moved] {
		t.Fatalf("after rebinding 0x4001 to another peer the fast path holds %v", r.s.installed)
	}
	r.exchange(4, stun.MethodChannelBind, []opt{withChannel(0x4002), withAddress(other)}, true)
	renumbered := moved
	renumbered.Number = 0x4002
	if len(r.s.installed) != 1 || !r.s.installed[renumbered] {
		t.Fatalf("after binding the peer to another number the fast path holds %v", r.s.installed)
	}
	r.exchange(5, stun.MethodChannelBind, []opt{withChannel(0x0002), withAddress(peer)}, true)
	if len(r.s.installed) != 1 {
		t.Fatalf("channel 0x0002 learned: %v", r.s.installed)
	}
}

// Found by FuzzLearnerRestore: a corrupt state file that repeats a channel
// number (or a 5-tuple) leaves no channel in the fast path that the learner
// does not know.
func TestRestoreRepeatedEntries(t *testing.T) {
	r := newRig(t)
	path := t.TempDir() + "/state.json"
	other := want
	other.Peer = netip.MustParseAddrPort("203.0.113.10:6000")
	state := `{"allocations":[` +
		`{"client":"` + client.String() + `","server":"` + server.String() + `","relay":"` + relay.String() + `","channels":[` +
		`{"number":16385,"peer":"` + want.Peer.String() + `"},{"number":16385,"peer":"` + other.Peer.String() + `"}]},` +
		`{"client":"` + client.String() + `","server":"` + server.String() + `","relay":"` + relay.String() + `","channels":[]}]}`
	if err := os.WriteFile(path, []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	r.s.installed[want], r.s.installed[other] = true, true
	if err := r.l.Restore(path, []offload.Channel{want, other}); err != nil {
		t.Fatal(err)
	}
	if len(r.s.installed) != 1 || !r.s.installed[want] {
		t.Fatalf("after restoring a repeated channel number the fast path holds %v", r.s.installed)
	}
	if a, c := r.l.Counts(); a != 1 || c != 1 {
		t.Fatalf("restored %d allocations and %d channels, want 1 and 1", a, c)
	}
}
