package offload

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/netorder"
)

// restoreChannels rebuilds the channel table from maps a previous run left
// pinned, so their channels can be refreshed and removed, and their counter
// slots are not handed out twice. A client route without its peer route is
// half a channel: it is removed.
func (e *Engine) restoreChannels() error {
	var used, usedBuckets []uint32
	var errs []error
	restore := func(ch Channel, toPeer turnRoute, deleteClient func() error) {
		var toClient turnRoute
		if e.lookupPeerRoute(ch, &toClient) != nil {
			errs = append(errs, ignoreNotExist(deleteClient()))
			return
		}
		e.channels[ch] = channelState{toPeerSlot: toPeer.StatsSlot, toClientSlot: toClient.StatsSlot,
			buckets: toPeer.Bucket != noBucket && toClient.Bucket != noBucket}
		used = append(used, toPeer.StatsSlot, toClient.StatsSlot)
		usedBuckets = append(usedBuckets, e.restoreBuckets(allocationOf(ch), toPeer.Bucket, toClient.Bucket)...)
	}
	var k4 turnClientKeyV4
	var r turnRoute
	for it := e.objs.ClientRoutesV4.Iterate(); it.Next(&k4, &r); {
		key := k4
		ch := Channel{Client: v4AddrPort(key.ClientIp, key.ClientPort), Server: v4AddrPort(key.ServerIp, key.ServerPort),
			Relay: endpointAddr(r.Src), Peer: endpointAddr(r.Dst), Number: netorder.Port(key.Channel)}
		restore(ch, r, func() error { return e.objs.ClientRoutesV4.Delete(&key) })
	}
	var k6 turnClientKeyV6
	for it := e.objs.ClientRoutesV6.Iterate(); it.Next(&k6, &r); {
		key := k6
		ch := Channel{Client: netip.AddrPortFrom(netip.AddrFrom16(key.ClientIp), netorder.Port(key.ClientPort)),
			Server: netip.AddrPortFrom(netip.AddrFrom16(key.ServerIp), netorder.Port(key.ServerPort)),
			Relay:  endpointAddr(r.Src), Peer: endpointAddr(r.Dst), Number: netorder.Port(key.Channel)}
		restore(ch, r, func() error { return e.objs.ClientRoutesV6.Delete(&key) })
	}
	e.slots.Reserve(used)
	e.bucketSlots.Reserve(usedBuckets)
	return errors.Join(errs...)
}

func (e *Engine) lookupPeerRoute(ch Channel, r *turnRoute) error {
	if ch.Peer.Addr().Is4() {
		return e.objs.PeerRoutesV4.Lookup(peerKeyV4(ch), r)
	}
	return e.objs.PeerRoutesV6.Lookup(peerKeyV6(ch), r)
}

func v4AddrPort(word uint32, port uint16) netip.AddrPort {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], word)
	return netip.AddrPortFrom(netip.AddrFrom4(b), netorder.Port(port))
}

func endpointAddr(ep turnEndpoint) netip.AddrPort {
	if ep.Family == afInet {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ep.Ip.Bytes[:4])), netorder.Port(ep.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(ep.Ip.Bytes), netorder.Port(ep.Port))
}
