package offload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/netorder"
)

// Channel is one bound TURN channel, with every address as it is on the wire.
type Channel struct {
	Client netip.AddrPort // the client's address as the server sees it
	Server netip.AddrPort // the listening address the client sends to (never a wildcard)
	Relay  netip.AddrPort // the allocation's relay address on the wire (not the advertised one)
	Peer   netip.AddrPort
	Number uint16
}

func (c Channel) normalized() Channel {
	unmap := addrport.Unmap
	return Channel{Client: unmap(c.Client), Server: unmap(c.Server), Relay: unmap(c.Relay), Peer: unmap(c.Peer), Number: c.Number}
}

func (c Channel) validate() error {
	switch {
	// RFC 8656 uses 0x4000-0x4FFF; RFC 5766 clients (coturn's among them) use
	// up to 0x7FFF, and the slow path (pion) accepts them, so the fast path does too.
	case c.Number < 0x4000 || c.Number > 0x7fff:
		return fmt.Errorf("channel number %#x outside 0x4000-0x7fff", c.Number)
	case !c.Client.IsValid() || !c.Server.IsValid() || !c.Relay.IsValid() || !c.Peer.IsValid():
		return errors.New("channel has an unset address")
	case c.Server.Addr().IsUnspecified() || c.Relay.Addr().IsUnspecified():
		return errors.New("server and relay addresses must be the on-wire ones, not wildcards")
	case c.Client.Addr().Is4() != c.Server.Addr().Is4():
		return errors.New("client and server address families differ")
	case c.Relay.Addr().Is4() != c.Peer.Addr().Is4():
		return errors.New("relay and peer address families differ")
	}
	return nil
}

func (c Channel) String() string {
	return fmt.Sprintf("%s->%s ch %#x relay %s->%s", c.Client, c.Server, c.Number, c.Relay, c.Peer)
}

type channelState struct {
	toPeerSlot, toClientSlot uint32
	buckets                  bool // holds its allocation's rate buckets
}

// AddChannel installs both directions of a channel. Adding an installed
// channel again is a no-op (ChannelBind refreshes).
func (e *Engine) AddChannel(ch Channel) error {
	ch = ch.normalized()
	if err := ch.validate(); err != nil {
		return fmt.Errorf("offload: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.channels[ch]; ok {
		return nil
	}
	st, err := e.allocSlots()
	if err != nil {
		return err
	}
	peerBucket, clientBucket, err := e.acquireBuckets(allocationOf(ch))
	if err != nil {
		e.freeSlots(st)
		return err
	}
	st.buckets = peerBucket != noBucket
	undo := func() {
		e.releaseBuckets(allocationOf(ch), st.buckets)
		e.freeSlots(st)
	}
	// IPv4 identifications start at a random value per route, as the kernel's do.
	toPeer := turnRoute{Src: endpointOf(ch.Relay), Dst: endpointOf(ch.Peer), StatsSlot: st.toPeerSlot,
		IpId: rand.Uint32(), Bucket: peerBucket}
	if e.relayIPs[ch.Peer.Addr()] {
		toPeer.Flags |= routeFlagPeerIsRelay
	}
	toClient := turnRoute{Src: endpointOf(ch.Server), Dst: endpointOf(ch.Client), Channel: netorder.Port(ch.Number),
		StatsSlot: st.toClientSlot, IpId: rand.Uint32(), Bucket: clientBucket}

	if err := e.putClientRoute(ch, &toPeer); err != nil {
		undo()
		return err
	}
	if err := e.putPeerRoute(ch, &toClient); err != nil {
		_ = e.deleteClientRoute(ch)
		undo()
		return err
	}
	e.channels[ch] = st
	return nil
}

// RemoveChannel removes both directions of a channel; removing an unknown
// channel is not an error.
func (e *Engine) RemoveChannel(ch Channel) error {
	ch = ch.normalized()
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.channels[ch]
	if !ok {
		return nil
	}
	delete(e.channels, ch)
	e.freeSlots(st)
	e.releaseBuckets(allocationOf(ch), st.buckets)
	return errors.Join(e.deleteClientRoute(ch), e.deletePeerRoute(ch))
}

const routeFlagPeerIsRelay = 0x1

func (e *Engine) putClientRoute(ch Channel, r *turnRoute) error {
	var err error
	if ch.Client.Addr().Is4() {
		err = e.objs.ClientRoutesV4.Update(clientKeyV4(ch), r, ebpf.UpdateAny)
	} else {
		err = e.objs.ClientRoutesV6.Update(clientKeyV6(ch), r, ebpf.UpdateAny)
	}
	if err != nil {
		return fmt.Errorf("offload: install %v client route: %w", ch, err)
	}
	return nil
}

func (e *Engine) putPeerRoute(ch Channel, r *turnRoute) error {
	var err error
	if ch.Peer.Addr().Is4() {
		err = e.objs.PeerRoutesV4.Update(peerKeyV4(ch), r, ebpf.UpdateAny)
	} else {
		err = e.objs.PeerRoutesV6.Update(peerKeyV6(ch), r, ebpf.UpdateAny)
	}
	if err != nil {
		return fmt.Errorf("offload: install %v peer route: %w", ch, err)
	}
	return nil
}

func (e *Engine) deleteClientRoute(ch Channel) error {
	if ch.Client.Addr().Is4() {
		return ignoreNotExist(e.objs.ClientRoutesV4.Delete(clientKeyV4(ch)))
	}
	return ignoreNotExist(e.objs.ClientRoutesV6.Delete(clientKeyV6(ch)))
}

func (e *Engine) deletePeerRoute(ch Channel) error {
	if ch.Peer.Addr().Is4() {
		return ignoreNotExist(e.objs.PeerRoutesV4.Delete(peerKeyV4(ch)))
	}
	return ignoreNotExist(e.objs.PeerRoutesV6.Delete(peerKeyV6(ch)))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

func clientKeyV4(ch Channel) *turnClientKeyV4 {
	return &turnClientKeyV4{
		ClientIp: netorder.IPv4(ch.Client.Addr()), ServerIp: netorder.IPv4(ch.Server.Addr()),
		ClientPort: netorder.Port(ch.Client.Port()), ServerPort: netorder.Port(ch.Server.Port()), Channel: netorder.Port(ch.Number),
	}
}

func clientKeyV6(ch Channel) *turnClientKeyV6 {
	return &turnClientKeyV6{
		ClientIp: ch.Client.Addr().As16(), ServerIp: ch.Server.Addr().As16(),
		ClientPort: netorder.Port(ch.Client.Port()), ServerPort: netorder.Port(ch.Server.Port()), Channel: netorder.Port(ch.Number),
	}
}

func peerKeyV4(ch Channel) *turnPeerKeyV4 {
	return &turnPeerKeyV4{
		PeerIp: netorder.IPv4(ch.Peer.Addr()), RelayIp: netorder.IPv4(ch.Relay.Addr()),
		PeerPort: netorder.Port(ch.Peer.Port()), RelayPort: netorder.Port(ch.Relay.Port()),
	}
}

func peerKeyV6(ch Channel) *turnPeerKeyV6 {
	return &turnPeerKeyV6{
		PeerIp: ch.Peer.Addr().As16(), RelayIp: ch.Relay.Addr().As16(),
		PeerPort: netorder.Port(ch.Peer.Port()), RelayPort: netorder.Port(ch.Relay.Port()),
	}
}

func (e *Engine) allocSlots() (channelState, error) {
	a, ok1 := e.slots.Get()
	b, ok2 := e.slots.Get()
	if !ok1 || !ok2 {
		if ok1 {
			e.slots.Put(a)
		}
		return channelState{}, errors.New("offload: channel table full")
	}
	st := channelState{toPeerSlot: a, toClientSlot: b}
	// A reused slot must start from zero.
	zero := make([]turnFlowStats, ebpf.MustPossibleCPU())
	for _, s := range []uint32{a, b} {
		if err := e.objs.Flows.Put(s, zero); err != nil {
			e.freeSlots(st)
			return channelState{}, fmt.Errorf("offload: reset counters: %w", err)
		}
	}
	return st, nil
}

func (e *Engine) freeSlots(st channelState) {
	e.slots.Put(st.toPeerSlot)
	e.slots.Put(st.toClientSlot)
}

// FlowStats counts one direction of one channel on the fast path.
type FlowStats struct {
	Packets  uint64
	Bytes    uint64 // data bytes (ChannelData payload)
	Dropped  uint64 // over the allocation's bandwidth limit
	LastSeen time.Time
}

// ChannelStats returns the fast-path counters of an installed channel.
func (e *Engine) ChannelStats(ch Channel) (toPeer, toClient FlowStats, err error) {
	ch = ch.normalized()
	e.mu.Lock()
	st, ok := e.channels[ch]
	e.mu.Unlock()
	if !ok {
		return FlowStats{}, FlowStats{}, fmt.Errorf("offload: %v is not installed", ch)
	}
	if toPeer, err = e.flowStats(st.toPeerSlot); err != nil {
		return
	}
	toClient, err = e.flowStats(st.toClientSlot)
	return
}

func (e *Engine) flowStats(slot uint32) (FlowStats, error) {
	var perCPU []turnFlowStats
	if err := e.objs.Flows.Lookup(slot, &perCPU); err != nil {
		return FlowStats{}, fmt.Errorf("offload: read counters: %w", err)
	}
	var s FlowStats
	var last uint64
	for _, c := range perCPU {
		s.Packets += c.Packets
		s.Bytes += c.Bytes
		s.Dropped += c.Dropped
		last = max(last, c.LastSeen)
	}
	if last != 0 {
		s.LastSeen = monotonicToWall(last)
	}
	return s, nil
}

// monotonicToWall converts a CLOCK_MONOTONIC_COARSE reading (what
// bpf_ktime_get_coarse_ns returns) to wall-clock time.
func monotonicToWall(ns uint64) time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return time.Time{}
	}
	now := uint64(ts.Nano())
	if ns > now {
		return time.Now()
	}
	return time.Now().Add(-time.Duration(now - ns))
}

// Outcomes returns the global per-outcome counters, summed over CPUs.
func (e *Engine) Outcomes() (map[Outcome]Counter, error) {
	out := make(map[Outcome]Counter, numOutcomes)
	for _, o := range Outcomes() {
		var perCPU []turnOutcomeStats
		if err := e.objs.Outcomes.Lookup(uint32(o), &perCPU); err != nil {
			return nil, fmt.Errorf("offload: read outcome %v: %w", o, err)
		}
		var c Counter
		for _, s := range perCPU {
			c.Packets += s.Packets
			c.Bytes += s.Bytes
		}
		out[o] = c
	}
	return out, nil
}
