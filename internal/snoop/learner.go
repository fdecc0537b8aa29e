// Package snoop learns the UDP channels of an unmodified TURN server (coturn,
// say) from its control traffic, as `ebrtc offload` does: clients' requests
// parsed at XDP ingress, the server's responses at TC egress (in BPF, see
// bpf/stun.h). A channel goes to the fast path only when the server's success
// response to that very request (same transaction id, same 5-tuple reversed)
// leaves the host.
package snoop

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// Lifetimes (RFC 8656): a channel lasts 10 minutes after its last
// ChannelBind; a request without an answer is forgotten after 30 s.
const (
	ChannelLifetime = 10 * time.Minute
	pendingLifetime = 30 * time.Second
	defaultLifetime = 10 * time.Minute // Allocate/Refresh without LIFETIME
)

// Sink receives the learned channels: the XDP engine.
type Sink interface {
	AddChannel(offload.Channel) error
	RemoveChannel(offload.Channel) error
}

// Learner matches requests to responses and keeps the channel table.
type Learner struct {
	sink      Sink
	now       func() time.Time
	log       func(format string, args ...any)
	statePath string                    // "" : state is not saved (see Restore)
	relayMap  map[netip.Addr]netip.Addr // advertised relay address -> on the wire (NAT)

	mu          sync.Mutex
	pending     map[[12]byte]request
	early       map[[12]byte]earlyResponse
	allocations map[fiveTuple]*allocation
}

// earlyResponse is a response read before its request: captures come from
// per-CPU buffers (XDP for requests, TC for responses), which keep no order
// between CPUs. It waits earlyLifetime for its request.
type earlyResponse struct {
	ev offload.SnoopEvent
	at time.Time
}

const earlyLifetime = 2 * time.Second

type fiveTuple struct{ client, server netip.AddrPort }

type request struct {
	method  stun.Method
	tuple   fiveTuple
	peer    netip.AddrPort // ChannelBind
	channel uint16         // ChannelBind
	at      time.Time
}

type allocation struct {
	relay    netip.AddrPort
	expires  time.Time
	channels map[uint16]*channel
}

type channel struct {
	ch      offload.Channel
	expires time.Time
}

// MapRelays tells the learner that the server advertises relay addresses
// (keys) other than those its sockets bind on the wire (values), as behind a
// 1:1 NAT. Relayed addresses, and peers at them (clients of this server
// reaching each other), are learned as the wire addresses.
func (l *Learner) MapRelays(m map[netip.Addr]netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.relayMap = m
}

func (l *Learner) toWire(ap netip.AddrPort) netip.AddrPort {
	if wire, ok := l.relayMap[ap.Addr()]; ok {
		return netip.AddrPortFrom(wire, ap.Port())
	}
	return ap
}

// NewLearner returns a learner that installs channels into sink.
func NewLearner(sink Sink, now func() time.Time, log func(string, ...any)) *Learner {
	return &Learner{sink: sink, now: now, log: log, pending: map[[12]byte]request{},
		early: map[[12]byte]earlyResponse{}, allocations: map[fiveTuple]*allocation{}}
}

// Handle takes one parsed control message.
func (l *Learner) Handle(ev offload.SnoopEvent) {
	var typ stun.MessageType
	typ.ReadValue(ev.Type)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ev.Direction == offload.SnoopRequest && typ.Class == stun.ClassRequest:
		l.request(ev, typ)
	case ev.Direction == offload.SnoopResponse && (typ.Class == stun.ClassSuccessResponse || typ.Class == stun.ClassErrorResponse):
		l.response(ev, typ)
	default:
		return
	}
	l.persist()
}

func (l *Learner) request(ev offload.SnoopEvent, typ stun.MessageType) {
	r := request{method: typ.Method, tuple: fiveTuple{client: ev.Client, server: ev.Server}, at: l.now()}
	if r.method == stun.MethodChannelBind {
		if !ev.HasChannel || !ev.HasAddress {
			return
		}
		r.channel, r.peer = ev.Channel, addrport.Unmap(ev.Address)
	}
	l.pending[ev.TransactionID] = r
	if e, ok := l.early[ev.TransactionID]; ok {
		delete(l.early, ev.TransactionID)
		var etyp stun.MessageType
		etyp.ReadValue(e.ev.Type)
		l.response(e.ev, etyp)
	}
}

func (l *Learner) response(ev offload.SnoopEvent, typ stun.MessageType) {
	t := fiveTuple{client: ev.Client, server: ev.Server}
	r, ok := l.pending[ev.TransactionID]
	if !ok {
		l.early[ev.TransactionID] = earlyResponse{ev: ev, at: l.now()}
		return
	}
	if r.tuple != t || r.method != typ.Method {
		return // for another client or another method: learn nothing
	}
	delete(l.pending, ev.TransactionID)
	if typ.Class != stun.ClassSuccessResponse {
		return
	}
	switch r.method {
	case stun.MethodAllocate:
		l.allocated(ev, t)
	case stun.MethodRefresh:
		l.refreshed(ev, t)
	case stun.MethodChannelBind:
		l.bound(r, t)
	}
}

func lifetimeOf(ev offload.SnoopEvent) time.Duration {
	if !ev.HasLifetime {
		return defaultLifetime
	}
	return time.Duration(ev.Lifetime) * time.Second
}

func (l *Learner) allocated(ev offload.SnoopEvent, t fiveTuple) {
	if !ev.HasAddress {
		return
	}
	// A new allocation on the same 5-tuple replaces the old state.
	l.drop(t)
	l.allocations[t] = &allocation{
		relay:    l.toWire(addrport.Unmap(ev.Address)),
		expires:  l.now().Add(lifetimeOf(ev)),
		channels: map[uint16]*channel{},
	}
}

func (l *Learner) refreshed(ev offload.SnoopEvent, t fiveTuple) {
	a := l.allocations[t]
	if a == nil {
		return
	}
	life := lifetimeOf(ev)
	if life == 0 {
		l.drop(t)
		return
	}
	a.expires = l.now().Add(life)
}

func (l *Learner) bound(r request, t fiveTuple) {
	r.peer = l.toWire(r.peer)
	a := l.allocations[t]
	// Channel numbers 0x4000-0x7FFF (RFC 8656 section 12, RFC 5766's upper
	// bound): whatever a server accepted beyond them, the data plane does not.
	if a == nil || a.relay.Addr().Is4() != r.peer.Addr().Is4() || r.channel < 0x4000 || r.channel > 0x7fff {
		return
	}
	expires := l.now().Add(ChannelLifetime)
	if c, ok := a.channels[r.channel]; ok && c.ch.Peer == r.peer {
		c.expires = expires // a refresh
		return
	}
	// The server accepted a binding that replaces others: the number bound
	// to another peer, or the peer bound to another number. Theirs go first,
	// or they would stay in the fast path, unknown here.
	for n, c := range a.channels {
		if n == r.channel || c.ch.Peer == r.peer {
			l.remove(c.ch)
			delete(a.channels, n)
		}
	}
	ch := offload.Channel{Client: t.client, Server: t.server, Relay: a.relay, Peer: r.peer, Number: r.channel}
	if err := l.sink.AddChannel(ch); err != nil {
		l.log("snoop: %v stays in user space: %v", ch, err)
		return
	}
	a.channels[r.channel] = &channel{ch: ch, expires: expires}
}

// drop removes an allocation and its channels.
func (l *Learner) drop(t fiveTuple) {
	a := l.allocations[t]
	if a == nil {
		return
	}
	for _, c := range a.channels {
		l.remove(c.ch)
	}
	delete(l.allocations, t)
}

func (l *Learner) remove(ch offload.Channel) {
	if err := l.sink.RemoveChannel(ch); err != nil {
		l.log("snoop: remove %v: %v", ch, err)
	}
}

// Sweep forgets what has expired: unanswered requests, channels not
// refreshed for ChannelLifetime, allocations past their lifetime.
func (l *Learner) Sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for id, r := range l.pending {
		if now.Sub(r.at) > pendingLifetime {
			delete(l.pending, id)
		}
	}
	// Never answered by a request: unsolicited, learn nothing.
	for id, e := range l.early {
		if now.Sub(e.at) > earlyLifetime {
			delete(l.early, id)
		}
	}
	changed := false
	for t, a := range l.allocations {
		if now.After(a.expires) {
			l.drop(t)
			changed = true
			continue
		}
		for n, c := range a.channels {
			if now.After(c.expires) {
				l.remove(c.ch)
				delete(a.channels, n)
				changed = true
			}
		}
	}
	if changed {
		l.persist()
	}
}

// Counts returns the learned allocations and channels.
func (l *Learner) Counts() (allocations, channels int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.allocations {
		channels += len(a.channels)
	}
	return len(l.allocations), channels
}

// Allocations are the learned allocations and channels for the admin
// endpoint, with each channel's fast-path counters when stats reads them.
func (l *Learner) Allocations(stats func(offload.Channel) (toPeer, toClient offload.FlowStats, err error)) []admin.Allocation {
	// Copied under the lock, counters read outside it: learning goes on.
	l.mu.Lock()
	out := make([]admin.Allocation, 0, len(l.allocations))
	var chans [][]offload.Channel
	for t, a := range l.allocations {
		out = append(out, admin.Allocation{Client: t.client, Relay: a.relay, Expires: a.expires})
		var cs []offload.Channel
		for _, c := range a.channels {
			cs = append(cs, c.ch)
		}
		chans = append(chans, cs)
	}
	l.mu.Unlock()
	for i := range out {
		al := &out[i]
		for _, ch := range chans[i] {
			ac := admin.Channel{Number: ch.Number, Peer: ch.Peer}
			if toPeer, toClient, err := stats(ch); err == nil {
				ac.Offload, ac.Fast = true, admin.FlowOf(toPeer, toClient)
				al.Fast = al.Fast.Add(ac.Fast)
			}
			al.Channels = append(al.Channels, ac)
		}
		slices.SortFunc(al.Channels, func(a, b admin.Channel) int { return cmp.Compare(a.Number, b.Number) })
	}
	slices.SortFunc(out, func(a, b admin.Allocation) int { return a.Client.Compare(b.Client) })
	return out
}

// Status describes every learned allocation and channel, with each
// channel's fast-path counters when stats can read them.
func (l *Learner) Status(stats func(offload.Channel) (toPeer, toClient offload.FlowStats, err error)) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	now := l.now()
	tuples := make([]fiveTuple, 0, len(l.allocations))
	for t := range l.allocations {
		tuples = append(tuples, t)
	}
	sort.Slice(tuples, func(i, j int) bool { return tuples[i].client.String() < tuples[j].client.String() })
	fmt.Fprintf(&b, "%d allocations\n", len(tuples))
	for _, t := range tuples {
		a := l.allocations[t]
		fmt.Fprintf(&b, "allocation %v -> %v relay %v, expires in %v\n", t.client, t.server, a.relay, a.expires.Sub(now).Round(time.Second))
		for _, c := range a.channels {
			fmt.Fprintf(&b, "  channel %#x peer %v, expires in %v", c.ch.Number, c.ch.Peer, c.expires.Sub(now).Round(time.Second))
			if toPeer, toClient, err := stats(c.ch); err == nil {
				fmt.Fprintf(&b, "; to peer %d pkts %d B, to client %d pkts %d B", toPeer.Packets, toPeer.Bytes, toClient.Packets, toClient.Bytes)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
