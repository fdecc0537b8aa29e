package snoop

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/offload"
)

// fuzzSink is the fast path as the learner sees it: it keeps what it is
// given and records what no engine may be asked for.
type fuzzSink struct {
	installed map[offload.Channel]bool
	added     []offload.Channel
	problems  []string
}

func newFuzzSink() *fuzzSink { return &fuzzSink{installed: map[offload.Channel]bool{}} }

func (s *fuzzSink) AddChannel(ch offload.Channel) error {
	if ch.Number < 0x4000 || ch.Number > 0x7fff {
		s.problems = append(s.problems, fmt.Sprintf("AddChannel(%v): number outside 0x4000-0x7fff", ch))
	}
	s.installed[ch] = true
	s.added = append(s.added, ch)
	return nil
}

func (s *fuzzSink) RemoveChannel(ch offload.Channel) error {
	if !s.installed[ch] {
		s.problems = append(s.problems, fmt.Sprintf("RemoveChannel(%v): not installed", ch))
		return fmt.Errorf("%v not installed", ch)
	}
	delete(s.installed, ch)
	return nil
}

// The universe the fuzzer draws from: few enough values that requests,
// responses and allocations meet.
var (
	fuzzClients = []netip.AddrPort{
		netip.MustParseAddrPort("198.51.100.7:40000"), netip.MustParseAddrPort("198.51.100.8:40000"),
		netip.MustParseAddrPort("[2001:db8:1::7]:40000"), netip.MustParseAddrPort("[::ffff:198.51.100.7]:40000"),
	}
	fuzzServers = []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:3478"), netip.MustParseAddrPort("[2001:db8::1]:3478"),
	}
	fuzzAddrs = []netip.AddrPort{ // relays and peers
		netip.MustParseAddrPort("192.0.2.1:50000"), netip.MustParseAddrPort("[2001:db8::1]:50000"),
		netip.MustParseAddrPort("203.0.113.9:6000"), netip.MustParseAddrPort("203.0.113.10:6000"),
		netip.MustParseAddrPort("[::ffff:203.0.113.9]:6000"), netip.MustParseAddrPort("[2001:db8:2::9]:6000"),
		netip.MustParseAddrPort("198.18.0.1:50001"), // advertised, mapped to fuzzWire with MapRelays
		netip.MustParseAddrPort("192.0.2.1:50002"),
	}
	fuzzAdvertised = netip.MustParseAddr("198.18.0.1")
	fuzzWire       = netip.MustParseAddr("192.0.2.1")
	fuzzMethods    = []stun.Method{stun.MethodAllocate, stun.MethodChannelBind, stun.MethodRefresh, stun.MethodCreatePermission}
	fuzzChannels   = []uint16{0x4000, 0x4001, 0x4001, 0x7fff}
	fuzzLifetimes  = []uint32{600, 0, 1, 3600}
)

// fuzzProgram reads the fuzzer's bytes as a sequence of operations.
type fuzzProgram struct{ b []byte }

func (p *fuzzProgram) next() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

func (p *fuzzProgram) u16() uint16 { return uint16(p.next())<<8 | uint16(p.next()) }

func pick[T any](p *fuzzProgram, from []T) T { return from[int(p.next())%len(from)] }

// event builds one snooped control message: mostly from the universe, now
// and then any type, channel or lifetime at all.
func (p *fuzzProgram) event() offload.SnoopEvent {
	c := p.next()
	ev := offload.SnoopEvent{
		Direction:     offload.SnoopDirection(1 + c&1),
		Client:        pick(p, fuzzClients),
		Server:        pick(p, fuzzServers),
		TransactionID: [12]byte{p.next() % 4},
	}
	classes := []stun.MessageClass{stun.ClassRequest, stun.ClassSuccessResponse, stun.ClassErrorResponse, stun.ClassIndication}
	ev.Type = stun.NewType(pick(p, fuzzMethods), classes[c>>1&3]).Value()
	if c&0x08 != 0 {
		ev.Type = p.u16() // any type, any direction
		ev.Direction = offload.SnoopDirection(p.next())
	}
	flags := p.next()
	if flags&1 != 0 {
		ev.HasChannel, ev.Channel = true, pick(p, fuzzChannels)
		if flags&0x10 != 0 {
			ev.Channel = p.u16()
		}
	}
	if flags&2 != 0 {
		ev.HasLifetime, ev.Lifetime = true, pick(p, fuzzLifetimes)
		if flags&0x20 != 0 {
			ev.Lifetime = uint32(p.u16())<<16 | uint32(p.u16())
		}
	}
	if flags&4 != 0 {
		ev.HasAddress, ev.Address = true, pick(p, fuzzAddrs)
	}
	return ev
}

type fuzzRig struct {
	t      *testing.T
	l      *Learner
	s      *fuzzSink
	now    time.Time
	mapped bool
	// requests and success responses of the TURN methods, by 5-tuple (and transaction id)
	requests  map[methodTuple]map[offload.SnoopEvent]bool
	successes map[methodTupleTx]map[offload.SnoopEvent]bool
	steps     []string // the same, with clock steps and sweeps, for failures
}

func (r *fuzzRig) toWire(ap netip.AddrPort) netip.AddrPort {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if r.mapped && ap.Addr() == fuzzAdvertised {
		return netip.AddrPortFrom(fuzzWire, ap.Port())
	}
	return ap
}

func isType(ev offload.SnoopEvent, dir offload.SnoopDirection, m stun.Method, c stun.MessageClass) bool {
	return ev.Direction == dir && ev.Type == stun.NewType(m, c).Value()
}

type methodTuple struct {
	method stun.Method
	tuple  fiveTuple
}

type methodTupleTx struct {
	methodTuple
	tx [12]byte
}

// record indexes the requests and success responses of the TURN methods.
func (r *fuzzRig) record(ev offload.SnoopEvent) {
	for _, m := range fuzzMethods {
		k := methodTuple{m, fiveTuple{ev.Client, ev.Server}}
		switch {
		case isType(ev, offload.SnoopRequest, m, stun.ClassRequest):
			if r.requests[k] == nil {
				r.requests[k] = map[offload.SnoopEvent]bool{}
			}
			r.requests[k][ev] = true
		case isType(ev, offload.SnoopResponse, m, stun.ClassSuccessResponse):
			kt := methodTupleTx{k, ev.TransactionID}
			if r.successes[kt] == nil {
				r.successes[kt] = map[offload.SnoopEvent]bool{}
			}
			r.successes[kt][ev] = true
		}
	}
}

// exchanged reports whether the history holds a request matching req and a
// success response to it (same transaction id, same 5-tuple) matching res,
// in either order (responses may be read before their requests).
func (r *fuzzRig) exchanged(m stun.Method, tuple fiveTuple, req, res func(offload.SnoopEvent) bool) bool {
	k := methodTuple{m, tuple}
	for q := range r.requests[k] {
		if !req(q) {
			continue
		}
		for s := range r.successes[methodTupleTx{k, q.TransactionID}] {
			if res(s) {
				return true
			}
		}
	}
	return false
}

func anyEvent(offload.SnoopEvent) bool { return true }

// check holds after every operation.
func (r *fuzzRig) check() {
	t := r.t
	if len(r.s.problems) > 0 {
		t.Fatalf("%s\nhistory:\n%s", r.s.problems[0], r.dump())
	}
	// Every channel offered was learned from the server's success
	// responses: a ChannelBind for it, on an allocation for its relay.
	for _, ch := range r.s.added {
		tuple := fiveTuple{ch.Client, ch.Server}
		bound := r.exchanged(stun.MethodChannelBind, tuple, func(q offload.SnoopEvent) bool {
			return q.HasChannel && q.Channel == ch.Number && q.HasAddress && r.toWire(q.Address) == ch.Peer
		}, anyEvent)
		allocated := r.exchanged(stun.MethodAllocate, tuple, anyEvent, func(s offload.SnoopEvent) bool {
			return s.HasAddress && r.toWire(s.Address) == ch.Relay
		})
		if !bound || !allocated {
			t.Fatalf("%v offered with no success response to a matching ChannelBind (%v) or Allocate (%v)\nhistory:\n%s", ch, bound, allocated, r.dump())
		}
		if ch.Relay.Addr().Is4() != ch.Peer.Addr().Is4() {
			t.Fatalf("%v: relay and peer of different families\nhistory:\n%s", ch, r.dump())
		}
	}
	r.s.added = r.s.added[:0]
	// The fast path holds exactly the learner's channels.
	known := map[offload.Channel]bool{}
	for tuple, a := range r.l.allocations {
		for n, c := range a.channels {
			if c.ch.Number != n || c.ch.Client != tuple.client || c.ch.Server != tuple.server || c.ch.Relay != a.relay {
				t.Fatalf("channel %v filed under %#x of allocation %v relay %v", c.ch, n, tuple, a.relay)
			}
			known[c.ch] = true
		}
	}
	for ch := range r.s.installed {
		if !known[ch] {
			t.Fatalf("%v stays in the fast path, but the learner forgot it (it is never removed)\nhistory:\n%s", ch, r.dump())
		}
	}
	for ch := range known {
		if !r.s.installed[ch] {
			t.Fatalf("the learner keeps %v, which is not in the fast path\nhistory:\n%s", ch, r.dump())
		}
	}
}

func (r *fuzzRig) dump() string {
	out := fmt.Sprintf("  MapRelays %v\n", r.mapped)
	for _, st := range r.steps {
		out += "  " + st + "\n"
	}
	return out
}

func describe(ev offload.SnoopEvent) string {
	var typ stun.MessageType
	typ.ReadValue(ev.Type)
	out := fmt.Sprintf("dir %d %v tx %d %v->%v", ev.Direction, typ, ev.TransactionID[0], ev.Client, ev.Server)
	if ev.HasChannel {
		out += fmt.Sprintf(" ch %#x", ev.Channel)
	}
	if ev.HasLifetime {
		out += fmt.Sprintf(" life %d", ev.Lifetime)
	}
	if ev.HasAddress {
		out += fmt.Sprintf(" addr %v", ev.Address)
	}
	return out
}

// Seeds: one event (op 0) as fuzzProgram.event reads it.
func seedEvent(c, client, server, tx, method, flags byte, attrs ...byte) []byte {
	return append([]byte{0, c, client, server, tx, method, flags}, attrs...)
}

const (
	seedRequest = 0 // c: direction 1, class request
	seedSuccess = 3 // direction 2, class success
	seedError   = 5 // direction 2, class error
	seedAlloc   = 0 // method index in fuzzMethods
	seedBind    = 1
	seedRefresh = 2
)

func seedProgram(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// FuzzLearner feeds the learner a fuzzed sequence of snooped requests and
// responses (any type, 5-tuple, transaction id, channel, lifetime, address),
// clock steps and sweeps. It never panics, and learner.go's contract holds
// after every step: a channel reaches the fast path only after the server's
// success response to that very ChannelBind request (same transaction id,
// same 5-tuple) on an allocation whose Allocate succeeded the same way, with
// a number in 0x4000-0x7fff; the fast path holds exactly the learner's
// channels (none left behind, none removed twice); a channel leaves within
// ChannelLifetime of its last ChannelBind, an unanswered request or an early
// response within its lifetime.
func FuzzLearner(f *testing.F) {
	allocReq := seedEvent(seedRequest, 0, 0, 0, seedAlloc, 0)
	allocOK := seedEvent(seedSuccess, 0, 0, 0, seedAlloc, 0x06, 0, 0) // lifetime 600, relay 192.0.2.1:50000
	bindReq := seedEvent(seedRequest, 0, 0, 1, seedBind, 0x05, 1, 2)  // 0x4001 to 203.0.113.9:6000
	bindOK := seedEvent(seedSuccess, 0, 0, 1, seedBind, 0)
	ok := seedProgram(allocReq, allocOK, bindReq, bindOK)
	f.Add(false, ok)
	// Ten minutes pass in steps, with sweeps.
	f.Add(true, seedProgram(ok, []byte{1, 100, 2, 1, 100, 2, 1, 50, 2}))
	// Responses read before their requests.
	f.Add(false, seedProgram(allocOK, allocReq, bindOK, bindReq))
	// A rejected ChannelBind, then Refresh(0).
	f.Add(false, seedProgram(allocReq, allocOK,
		seedEvent(seedRequest, 0, 0, 2, seedBind, 0x05, 1, 3), seedEvent(seedError, 0, 0, 2, seedBind, 0),
		bindReq, bindOK,
		seedEvent(seedRequest, 0, 0, 3, seedRefresh, 0x02, 1), seedEvent(seedSuccess, 0, 0, 3, seedRefresh, 0x02, 1)))
	// Behind the relay map, a peer at the advertised address; a new
	// allocation on the same 5-tuple.
	f.Add(true, seedProgram(allocReq, seedEvent(seedSuccess, 0, 0, 0, seedAlloc, 0x04, 6),
		seedEvent(seedRequest, 0, 0, 1, seedBind, 0x05, 0, 7), bindOK, allocReq, allocOK))
	// A response for another client; an IPv6 allocation.
	f.Add(false, seedProgram(allocReq, seedEvent(seedSuccess, 1, 0, 0, seedAlloc, 0x04, 0),
		seedEvent(seedRequest, 2, 1, 2, seedAlloc, 0), seedEvent(seedSuccess, 2, 1, 2, seedAlloc, 0x04, 1),
		seedEvent(seedRequest, 2, 1, 3, seedBind, 0x05, 3, 5), seedEvent(seedSuccess, 2, 1, 3, seedBind, 0)))
	// The binding refreshed by a second ChannelBind to the same peer.
	f.Add(false, seedProgram(ok, seedEvent(seedRequest, 0, 0, 2, seedBind, 0x05, 1, 2), seedEvent(seedSuccess, 0, 0, 2, seedBind, 0)))
	// A channel number given in full (0x4002).
	f.Add(false, seedProgram(allocReq, allocOK, seedEvent(seedRequest, 0, 0, 1, seedBind, 0x15, 1, 0x40, 0x02, 2), bindOK))
	// Any type, direction and lifetime.
	f.Add(true, []byte{0, 0x08, 1, 1, 3, 0, 0x01, 0x13, 0x07, 0x22, 1, 2, 3, 4, 5, 6})

	f.Fuzz(func(t *testing.T, mapped bool, ops []byte) {
		if len(ops) > 256 { // some 25 events: enough, and quick to minimize
			return
		}
		r := &fuzzRig{t: t, s: newFuzzSink(), now: time.Unix(1_800_000_000, 0), mapped: mapped,
			requests: map[methodTuple]map[offload.SnoopEvent]bool{}, successes: map[methodTupleTx]map[offload.SnoopEvent]bool{}}
		r.l = NewLearner(r.s, func() time.Time { return r.now }, func(string, ...any) {})
		if mapped {
			r.l.MapRelays(map[netip.Addr]netip.Addr{fuzzAdvertised: fuzzWire})
		}
		p := &fuzzProgram{b: ops}
		for len(p.b) > 0 {
			switch op := p.next(); op % 4 {
			case 1: // the clock moves up to 255 * 3 s
				step := time.Duration(p.next()) * 3 * time.Second
				r.now = r.now.Add(step)
				r.steps = append(r.steps, fmt.Sprintf("clock +%v", step))
			case 2:
				r.l.Sweep()
				r.steps = append(r.steps, "sweep")
			default:
				ev := p.event()
				r.record(ev)
				r.steps = append(r.steps, describe(ev))
				r.l.Handle(ev)
			}
			r.check()
		}
		// Nothing more is said: every channel leaves ChannelLifetime after
		// its last ChannelBind, whatever its allocation's lifetime.
		r.now = r.now.Add(ChannelLifetime + time.Second)
		r.l.Sweep()
		r.steps = append(r.steps, "clock +ChannelLifetime+1s, sweep")
		r.check()
		if len(r.s.installed) != 0 {
			t.Fatalf("channels %v still in the fast path %v after their last ChannelBind\nhistory:\n%s", r.s.installed, ChannelLifetime, r.dump())
		}
		if len(r.l.pending) != 0 || len(r.l.early) != 0 {
			t.Fatalf("%d requests and %d early responses kept past their lifetimes", len(r.l.pending), len(r.l.early))
		}
	})
}

// fuzzStateDir is a directory for the state files, one per process
// (executions in a process run one at a time). Restore saves by rename over
// the old file, which ext4 turns into a flush to disk: on tmpfs (/dev/shm)
// when there is one, the target runs a hundred times faster.
func fuzzStateDir(f *testing.F) string {
	dir, err := os.MkdirTemp("/dev/shm", "ebrtc-fuzz-")
	if err != nil {
		return f.TempDir()
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FuzzLearnerRestore: Restore reads any state file (it is on disk across
// restarts) without panicking or failing on bad content, and reconciles it
// with the channels the pinned maps kept: afterwards the fast path holds
// exactly the channels the learner knows, each one both the file and the
// maps had; and the state it saves restores to the same.
func FuzzLearnerRestore(f *testing.F) {
	exp := time.Unix(1_800_000_600, 0).UTC()
	st := savedState{Allocations: []savedAllocation{{
		Client: fuzzClients[0], Server: fuzzServers[0], Relay: fuzzAddrs[0], Expires: exp,
		Channels: []savedChannel{{Number: 0x4001, Peer: fuzzAddrs[2], Expires: exp}, {Number: 0x4002, Peer: fuzzAddrs[3], Expires: exp}},
	}}}
	good, _ := json.Marshal(st)
	f.Add(good, uint8(0x3))
	f.Add(good, uint8(0x1f))
	f.Add([]byte(`{"allocations":[{"client":"198.51.100.7:40000","server":"192.0.2.1:3478","relay":"bogus"}]}`), uint8(0))
	f.Add([]byte(`not json`), uint8(1))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte(`{"allocations":null}`), uint8(2))

	dir := fuzzStateDir(f)
	f.Fuzz(func(t *testing.T, state []byte, inMaps uint8) {
		if len(state) > 512 { // a few allocations; larger inputs only slow minimization
			return
		}
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, state, 0o600); err != nil {
			t.Fatal(err)
		}
		// The pinned maps kept some of the file's channels (bits of inMaps)
		// and an orphan.
		var file savedState
		_ = json.Unmarshal(state, &file)
		var installed []offload.Channel
		i := 0
		for _, sa := range file.Allocations {
			for _, sc := range sa.Channels {
				if i < 7 && inMaps&(1<<i) != 0 {
					installed = append(installed, offload.Channel{Client: sa.Client, Server: sa.Server, Relay: sa.Relay, Peer: sc.Peer, Number: sc.Number})
				}
				i++
			}
		}
		if inMaps&0x80 != 0 {
			installed = append(installed, offload.Channel{Client: fuzzClients[1], Server: fuzzServers[0], Relay: fuzzAddrs[0], Peer: fuzzAddrs[3], Number: 0x4fff})
		}

		restore := func(path string) (*Learner, *fuzzSink) {
			s := newFuzzSink()
			for _, ch := range installed {
				s.installed[ch] = true
			}
			l := NewLearner(s, func() time.Time { return time.Unix(1_800_000_000, 0) }, func(string, ...any) {})
			if err := l.Restore(path, installed); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if len(s.problems) > 0 {
				t.Fatal(s.problems[0])
			}
			known := map[offload.Channel]bool{}
			for _, a := range l.allocations {
				for _, c := range a.channels {
					known[c.ch] = true
				}
			}
			inMaps := map[offload.Channel]bool{}
			for _, ch := range installed {
				inMaps[ch] = true
			}
			for ch := range s.installed {
				if !known[ch] {
					t.Fatalf("%v stays in the fast path, unknown to the restored learner (state %s, maps %v)", ch, state, installed)
				}
			}
			for ch := range known {
				if !s.installed[ch] || !inMaps[ch] {
					t.Fatalf("restored learner keeps %v, which the maps did not (state %s, maps %v)", ch, state, installed)
				}
			}
			return l, s
		}
		l1, _ := restore(path)
		// What it saved restores to the same learner.
		saved, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("Restore saved no state: %v", err)
		}
		path2 := filepath.Join(dir, "again.json")
		if err := os.WriteFile(path2, saved, 0o600); err != nil {
			t.Fatal(err)
		}
		l2, _ := restore(path2)
		a1, c1 := l1.Counts()
		a2, c2 := l2.Counts()
		if a1 != a2 || c1 != c2 {
			t.Fatalf("restored %d allocations %d channels; from what that saved, %d and %d (state %s)", a1, c1, a2, c2, state)
		}
	})
}
