// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package allocation

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/pion/turn/v5/internal/proto"
)

// expiry is when a lifetime timer fires, kept beside the timer (which
// cannot tell) so the state can be exported.
type expiry struct{ unixNano atomic.Int64 }

func (e *expiry) set(lifetime time.Duration) { e.unixNano.Store(time.Now().Add(lifetime).UnixNano()) }

func (e *expiry) time() time.Time { return time.Unix(0, e.unixNano.Load()) }

// State is a UDP allocation's state: what another Manager needs to go on
// serving it with the same relay socket.
type State struct {
	FiveTuple     *FiveTuple
	RelayAddr     net.Addr
	RelayConn     net.PacketConn
	UserID, Realm string
	AddressFamily proto.RequestedAddressFamily
	Expires       time.Time
	Permissions   []PermissionState
	Channels      []ChannelState
}

// PermissionState is a permission of an exported allocation.
type PermissionState struct {
	Addr    net.Addr
	Expires time.Time
}

// ChannelState is a channel binding of an exported allocation.
type ChannelState struct {
	Number  proto.ChannelNumber
	Peer    net.Addr
	Expires time.Time
}

// Export returns the state of the manager's UDP allocations. The caller
// stops the requests that change it first (an export is a snapshot).
func (m *Manager) Export() []State {
	m.lock.RLock()
	defer m.lock.RUnlock()
	out := make([]State, 0, len(m.allocations))
	for _, a := range m.allocations {
		if a.relayPacketConn == nil {
			continue // RFC 6062 allocations live on their TCP connections
		}
		st := State{
			FiveTuple: a.fiveTuple, RelayAddr: a.RelayAddr, RelayConn: a.relayPacketConn,
			UserID: a.userID, Realm: a.realm, AddressFamily: a.addressFamily, Expires: a.expires.time(),
		}
		for _, p := range a.ListPermissions() {
			st.Permissions = append(st.Permissions, PermissionState{Addr: p.Addr, Expires: p.expires.time()})
		}
		for _, c := range a.ListChannelBindings() {
			st.Channels = append(st.Channels, ChannelState{Number: c.Number, Peer: c.Peer, Expires: c.expires.time()})
		}
		out = append(out, st)
	}

	return out
}

// Import adds an allocation exported by another Manager and starts relaying
// on its RelayConn. Its lifetimes run on from the exported expiry times, and
// the event handlers see it, its permissions and its channels created.
// Permissions and channels that have expired meanwhile are left out.
func (m *Manager) Import(st State, turnSocket net.PacketConn) (*Allocation, error) {
	now := time.Now()
	switch {
	case st.FiveTuple == nil || st.FiveTuple.SrcAddr == nil || st.FiveTuple.DstAddr == nil:
		return nil, errNilFiveTuple
	case turnSocket == nil:
		return nil, errNilTurnSocket
	case st.RelayConn == nil:
		return nil, errNilRelaySocket
	case !st.Expires.After(now):
		return nil, errLifetimeZero
	case m.GetAllocation(st.FiveTuple) != nil:
		return nil, errDupeFiveTuple
	}
	alloc := NewAllocation(turnSocket, st.FiveTuple, m.EventHandler, m.log)
	alloc.userID, alloc.realm, alloc.addressFamily = st.UserID, st.Realm, st.AddressFamily
	alloc.relayPacketConn, alloc.RelayAddr = st.RelayConn, st.RelayAddr
	alloc.expires.set(st.Expires.Sub(now))
	alloc.lifetimeTimer = time.AfterFunc(st.Expires.Sub(now), func() {
		m.DeleteAllocation(alloc.fiveTuple)
	})

	m.lock.Lock()
	m.allocations[st.FiveTuple.Fingerprint()] = alloc
	m.lock.Unlock()

	if m.EventHandler.OnAllocationCreated != nil {
		m.EventHandler.OnAllocationCreated(st.FiveTuple.SrcAddr, st.FiveTuple.DstAddr,
			st.FiveTuple.Protocol.String(), st.UserID, st.Realm, alloc.RelayAddr, 0)
	}
	for _, p := range st.Permissions {
		if p.Expires.After(now) {
			alloc.AddPermission(NewPermission(p.Addr, m.log, p.Expires.Sub(now)))
		}
	}
	for _, c := range st.Channels {
		if c.Expires.After(now) {
			alloc.importChannelBind(NewChannelBind(c.Number, c.Peer, m.log), c.Expires.Sub(now))
		}
	}
	go alloc.packetConnHandler(m)

	return alloc, nil
}

// importChannelBind adds a binding without refreshing its peer's
// permission, which was imported with its own lifetime.
func (a *Allocation) importChannelBind(chanBind *ChannelBind, lifetime time.Duration) {
	a.channelBindingsLock.Lock()
	chanBind.allocation = a
	a.channelBindings = append(a.channelBindings, chanBind)
	chanBind.start(lifetime)
	a.channelBindingsLock.Unlock()

	if a.eventHandler.OnChannelCreated != nil {
		a.eventHandler.OnChannelCreated(a.fiveTuple.SrcAddr, a.fiveTuple.DstAddr,
			a.fiveTuple.Protocol.String(), a.userID, a.realm,
			a.RelayAddr, chanBind.Peer, uint16(chanBind.Number))
	}
}
