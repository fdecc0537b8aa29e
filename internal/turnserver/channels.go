package turnserver

import (
	"net"
	"net/netip"
	"sync"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// channelSink is where offloadable channels go: the XDP engine.
type channelSink interface {
	AddChannel(offload.Channel) error
	RemoveChannel(offload.Channel) error
	ChannelStats(offload.Channel) (toPeer, toClient offload.FlowStats, err error)
}

// channelTable follows pion's allocation events and keeps the fast path equal
// to what the slow path would relay: a channel is installed only while the
// channel AND a permission for its peer's IP exist, only for plain UDP
// listeners (never TCP/TLS/DTLS, whose clients expect their transport), and
// with wire addresses (listener wildcard and advertised relay resolved).
type channelTable struct {
	sink         channelSink
	udpListeners map[netip.AddrPort]bool
	toWire       func(netip.AddrPort) netip.AddrPort
	peerAllowed  func(peer netip.AddrPort) bool // as the client named it
	serverFor    func(listener, client netip.AddrPort) (netip.AddrPort, error)
	retired      func(ch offload.Channel, toPeer, toClient offload.FlowStats) // what it relayed, as it leaves (nil: unused)
	log          logging.LeveledLogger

	mu          sync.Mutex
	allocations map[allocKey]*allocState
}

type allocKey struct{ client, listener netip.AddrPort }

type allocState struct {
	server   netip.AddrPort // on the wire
	perms    map[netip.Addr]bool
	channels map[uint16]offload.Channel
}

// addrPort is a UDP or TCP address as an unmapped AddrPort (called per
// relayed datagram: no formatting and parsing for the common types).
func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch v := a.(type) {
	case *net.UDPAddr:
		ap = v.AddrPort()
	case *net.TCPAddr:
		ap = v.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.AddrPort{}
		}
	}
	return addrport.Unmap(ap)
}

// state returns the allocation's state, creating it on first use; nil when
// the allocation cannot be offloaded.
func (t *channelTable) state(src, dst net.Addr) *allocState {
	key := allocKey{addrPort(src), addrPort(dst)}
	if st, ok := t.allocations[key]; ok {
		return st
	}
	if !isPlainUDP(src, dst) || !t.udpListeners[key.listener] {
		return nil
	}
	server, err := t.serverFor(key.listener, key.client)
	if err != nil {
		t.log.Warnf("offload: no server address towards %v: %v; its channels stay in user space", key.client, err)
		return nil
	}
	st := &allocState{server: server, perms: map[netip.Addr]bool{}, channels: map[uint16]offload.Channel{}}
	t.allocations[key] = st
	return st
}

// isPlainUDP tells a client on a UDP socket from one on TCP or TLS. pion's
// events cannot: their protocol is the relay's transport, always "UDP", and a
// TCP listener has the same address as the UDP one on its port. (DTLS clients
// have UDP addresses but their listener is not in udpListeners.)
func isPlainUDP(src, dst net.Addr) bool {
	_, srcUDP := src.(*net.UDPAddr)
	_, dstUDP := dst.(*net.UDPAddr)
	return srcUDP && dstUDP
}

func (t *channelTable) install(ch offload.Channel) {
	if err := t.sink.AddChannel(ch); err != nil {
		t.log.Warnf("%v stays in user space: %v", ch, err)
	}
}

func (t *channelTable) uninstall(ch offload.Channel) {
	// What the fast path relayed for the channel is only in the BPF counters:
	// report it before they go.
	if toPeer, toClient, err := t.sink.ChannelStats(ch); err == nil {
		if t.retired != nil {
			t.retired(ch, toPeer, toClient)
		}
		t.log.Infof("%v left the fast path: to peer %d packets %d bytes, to client %d packets %d bytes, last seen %s",
			ch, toPeer.Packets, toPeer.Bytes, toClient.Packets, toClient.Bytes, lastSeen(toPeer, toClient))
	}
	if err := t.sink.RemoveChannel(ch); err != nil {
		t.log.Errorf("offload: remove %v: %v", ch, err)
	}
}

func (t *channelTable) channelCreated(src, dst, relay, peer net.Addr, number uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(src, dst)
	if st == nil {
		return
	}
	// pion checks the peer's IP; the port matters at our own addresses, and
	// user space refuses such datagrams (relayConn), so must the fast path.
	if !t.peerAllowed(addrPort(peer)) {
		t.log.Debugf("channel %#x to %v stays in user space, which refuses it: not a peer", number, peer)
		return
	}
	ch := offload.Channel{
		Client: addrPort(src), Server: st.server,
		Relay: t.toWire(addrPort(relay)), Peer: t.toWire(addrPort(peer)), // a peer at our advertised address is our relay
		Number: number,
	}
	st.channels[number] = ch
	if st.perms[addrPort(peer).Addr()] {
		t.install(ch)
	}
}

func (t *channelTable) channelDeleted(src, dst net.Addr, number uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.allocations[allocKey{addrPort(src), addrPort(dst)}]
	if st == nil {
		return
	}
	if ch, ok := st.channels[number]; ok {
		delete(st.channels, number)
		t.uninstall(ch)
	}
}

func (t *channelTable) permissionCreated(src, dst net.Addr, peer net.IP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(src, dst)
	if st == nil {
		return
	}
	ip, _ := netip.AddrFromSlice(peer)
	st.perms[ip.Unmap()] = true
	for _, ch := range st.channels {
		if t.permitted(st, ch) {
			t.install(ch)
		}
	}
}

func (t *channelTable) permissionDeleted(src, dst net.Addr, peer net.IP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.allocations[allocKey{addrPort(src), addrPort(dst)}]
	if st == nil {
		return
	}
	ip, _ := netip.AddrFromSlice(peer)
	delete(st.perms, ip.Unmap())
	for _, ch := range st.channels {
		if !t.permitted(st, ch) {
			t.uninstall(ch)
		}
	}
}

// permitted checks the permission for the peer as the client named it (the
// channel's Peer may have been mapped from the advertised to the wire address).
func (t *channelTable) permitted(st *allocState, ch offload.Channel) bool {
	for ip := range st.perms {
		if t.toWire(netip.AddrPortFrom(ip, ch.Peer.Port())) == ch.Peer {
			return true
		}
	}
	return false
}

func (t *channelTable) allocationDeleted(src, dst net.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := allocKey{addrPort(src), addrPort(dst)}
	st := t.allocations[key]
	if st == nil {
		return
	}
	for _, ch := range st.channels {
		t.uninstall(ch)
	}
	delete(t.allocations, key)
}

func lastSeen(a, b offload.FlowStats) string {
	last := a.LastSeen
	if b.LastSeen.After(last) {
		last = b.LastSeen
	}
	if last.IsZero() {
		return "never"
	}
	return last.UTC().Format("15:04:05.000")
}

// eventHandler wires the table, the allocation counters and the relay
// sockets' view of permissions (perms) into pion.
func (t *channelTable) eventHandler(allocs *allocationCounter, perms func(relay net.Addr, peer net.IP, ok bool)) turn.EventHandler {
	return turn.EventHandler{
		OnAllocationCreated: func(src, dst net.Addr, protocol, userID, realm string, relay net.Addr, port int) {
			allocs.created(userID, src)
		},
		OnAllocationDeleted: func(src, dst net.Addr, protocol, userID, realm string) {
			allocs.deleted(userID, src)
			t.allocationDeleted(src, dst)
		},
		OnPermissionCreated: func(src, dst net.Addr, protocol, userID, realm string, relay net.Addr, peer net.IP) {
			perms(relay, peer, true)
			t.permissionCreated(src, dst, peer)
		},
		OnPermissionDeleted: func(src, dst net.Addr, protocol, userID, realm string, relay net.Addr, peer net.IP) {
			perms(relay, peer, false)
			t.permissionDeleted(src, dst, peer)
		},
		OnChannelCreated: func(src, dst net.Addr, protocol, userID, realm string, relay, peer net.Addr, number uint16) {
			allocs.channel(+1)
			t.channelCreated(src, dst, relay, peer, number)
		},
		OnChannelDeleted: func(src, dst net.Addr, protocol, userID, realm string, relay, peer net.Addr, number uint16) {
			allocs.channel(-1)
			t.channelDeleted(src, dst, number)
		},
	}
}

// detachSink stops the table from changing the fast path (its channels now
// belong to a successor); attachSink resumes with sink.
func (t *channelTable) detachSink() { t.attachSink(discardSink{}) }

func (t *channelTable) attachSink(sink channelSink) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sink = sink
}

// installed are the channels the fast path should hold: bound, with a
// permission for their peer.
func (t *channelTable) installed() map[offload.Channel]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[offload.Channel]bool{}
	for _, st := range t.allocations {
		for _, ch := range st.channels {
			if t.permitted(st, ch) {
				out[ch] = true
			}
		}
	}
	return out
}
