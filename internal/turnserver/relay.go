package turnserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
)

// relayGenerator hands out relay sockets on the on-wire relay address of the
// requested family and advertises the external address (if one is set).
// pion reports the advertised address in its events; toWire maps it back.
// It knows which relay ports are live, which is what makes a peer at one of
// our own addresses acceptable (peerAllowed).
type relayGenerator struct {
	relayIPs, externalIPs []netip.Addr
	minPort, maxPort      int
	policy                *PeerPolicy
	limit                 ratelimit.Limit // per allocation and direction
	stats                 *slowStats
	events                *metrics.Events
	guard                 controlFunc // attaches the source guard to relay sockets (nil: none)

	live liveRelays
}

var errNoRelayFamily = errors.New("no relay address of the requested family")

func (g *relayGenerator) Validate() error {
	if len(g.relayIPs) == 0 {
		return errors.New("relay generator: no relay address")
	}
	return nil
}

func (g *relayGenerator) addresses(network string) (wire, advertised netip.Addr, err error) {
	v4 := network == "udp4" || network == "tcp4"
	wire = relayIPFor(g.relayIPs, v4)
	if !wire.IsValid() {
		return wire, wire, fmt.Errorf("%w (%s)", errNoRelayFamily, network)
	}
	advertised = relayIPFor(g.externalIPs, v4)
	if !advertised.IsValid() {
		advertised = wire
	}
	return wire, advertised, nil
}

// toWire maps an address pion reports as a relay address (the advertised
// one) to the address the relay socket has on the wire.
func (g *relayGenerator) toWire(advertised netip.AddrPort) netip.AddrPort {
	a := advertised.Addr().Unmap()
	for _, ext := range g.externalIPs {
		if ext == a {
			return netip.AddrPortFrom(relayIPFor(g.relayIPs, a.Is4()), advertised.Port())
		}
	}
	return netip.AddrPortFrom(a, advertised.Port())
}

// peerAllowed is the per-datagram (and per-connection) peer check: the
// policy's, and at our own relay addresses only the live relay sockets of
// the same transport (another client's allocation: the hairpin), never
// another port, where a service of the host could listen.
func (g *relayGenerator) peerAllowed(peer netip.AddrPort, tcp bool) bool {
	ip := peer.Addr().Unmap()
	if !g.policy.Allowed(ip) {
		return false
	}
	return !g.policy.IsOwn(ip) || g.live.has(g.toWire(netip.AddrPortFrom(ip, peer.Port())), tcp)
}

// ports yields the requested port, or random ports of the range, at most 64 tries.
func (g *relayGenerator) ports(requested int) []int {
	if requested != 0 {
		return []int{requested}
	}
	n := min(64, g.maxPort-g.minPort+1)
	out := make([]int, n)
	for i := range out {
		out[i] = g.minPort + rand.IntN(g.maxPort-g.minPort+1)
	}
	return out
}

func (g *relayGenerator) AllocatePacketConn(conf turn.AllocateListenerConfig) (net.PacketConn, net.Addr, error) {
	wire, advertised, err := g.addresses(conf.Network)
	if err != nil {
		return nil, nil, err
	}
	lc := net.ListenConfig{Control: controlWith(setUDPBuffers, g.guard)}
	for _, port := range g.ports(conf.RequestedPort) {
		conn, err := lc.ListenPacket(context.Background(), conf.Network, net.JoinHostPort(wire.String(), strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := netip.AddrPortFrom(wire, uint16(port))
		g.live.add(addr, false)
		return &relayConn{PacketConn: conn, gen: g, addr: addr}, &net.UDPAddr{IP: advertised.AsSlice(), Port: port}, nil
	}
	return nil, nil, fmt.Errorf("no free relay port in %d-%d", g.minPort, g.maxPort)
}

func (g *relayGenerator) AllocateListener(conf turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	wire, advertised, err := g.addresses(conf.Network)
	if err != nil {
		return nil, nil, err
	}
	// SO_REUSEPORT: RFC 6062 connections to peers leave from this same
	// address and port (AllocateConn), which Linux allows only when every
	// socket bound there sets it.
	lc := net.ListenConfig{Control: setReusePort}
	for _, port := range g.ports(conf.RequestedPort) {
		ln, err := lc.Listen(context.Background(), conf.Network, net.JoinHostPort(wire.String(), strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := netip.AddrPortFrom(wire, uint16(port))
		g.live.add(addr, true)
		return &relayListener{Listener: ln, gen: g, addr: addr}, &net.TCPAddr{IP: advertised.AsSlice(), Port: port}, nil
	}
	return nil, nil, fmt.Errorf("no free relay port in %d-%d", g.minPort, g.maxPort)
}

var errRefusedPeer = errors.New("relay: peer refused")

// AllocateConn opens an RFC 6062 connection to a peer from the allocation's
// relay address (its listener's port).
func (g *relayGenerator) AllocateConn(conf turn.AllocateConnConfig) (net.Conn, error) {
	remote := addrPort(conf.RemoteAddr)
	if !g.peerAllowed(remote, true) {
		g.events.Dropped.WithLabelValues("refused_peer").Inc()
		return nil, fmt.Errorf("%w: %v", errRefusedPeer, remote)
	}
	d := net.Dialer{Control: setReusePort}
	if conf.LocalAddr != nil {
		if local, err := netip.ParseAddrPort(conf.LocalAddr.String()); err == nil {
			d.LocalAddr = net.TCPAddrFromAddrPort(g.toWire(local))
		}
	}
	return d.Dial(conf.Network, conf.RemoteAddr.String())
}

// liveRelays are the relay addresses with an open socket, by transport.
type liveRelays struct {
	mu       sync.Mutex
	udp, tcp map[netip.AddrPort]bool
}

func (l *liveRelays) add(a netip.AddrPort, tcp bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.udp == nil {
		l.udp, l.tcp = map[netip.AddrPort]bool{}, map[netip.AddrPort]bool{}
	}
	l.set(tcp)[a] = true
}

func (l *liveRelays) remove(a netip.AddrPort, tcp bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.set(tcp), a)
}

func (l *liveRelays) has(a netip.AddrPort, tcp bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set(tcp)[a]
}

func (l *liveRelays) set(tcp bool) map[netip.AddrPort]bool {
	if tcp {
		return l.tcp
	}
	return l.udp
}

// relayConn is an allocation's UDP relay socket. It sends only to peers
// peerAllowed accepts (so no client reaches the host's own services, nor the
// TURN server through its own relay), keeps the allocation within its
// bandwidth limit in each direction, and counts what it relays. (Datagrams
// spoofed from our own addresses never reach it: package sourceguard.)
type relayConn struct {
	net.PacketConn
	gen              *relayGenerator
	addr             netip.AddrPort // on the wire
	toPeer, toClient ratelimit.Bucket
	closeOnce        sync.Once
}

func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !c.gen.peerAllowed(addrPort(addr), false) {
		c.gen.events.Dropped.WithLabelValues("refused_peer").Inc()
		return 0, fmt.Errorf("%w: %v", errRefusedPeer, addr)
	}
	if !c.toPeer.Take(c.gen.limit, len(p), ratelimit.Now()) {
		c.gen.events.Dropped.WithLabelValues("rate_limit").Inc()
		return len(p), nil // dropped like a congested link would, not an error
	}
	n, err := c.PacketConn.WriteTo(p, addr)
	if err == nil {
		c.gen.stats.toPeer.add(n)
	}
	return n, err
}

func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil {
			return n, addr, err
		}
		if !c.toClient.Take(c.gen.limit, n, ratelimit.Now()) {
			c.gen.events.Dropped.WithLabelValues("rate_limit").Inc()
			continue
		}
		c.gen.stats.toClient.add(n)
		return n, addr, nil
	}
}

func (c *relayConn) Close() error {
	c.closeOnce.Do(func() { c.gen.live.remove(c.addr, false) })
	return c.PacketConn.Close()
}

// relayListener is an RFC 6062 allocation's listener; it is live until closed.
type relayListener struct {
	net.Listener
	gen       *relayGenerator
	addr      netip.AddrPort
	closeOnce sync.Once
}

func (l *relayListener) Close() error {
	l.closeOnce.Do(func() { l.gen.live.remove(l.addr, true) })
	return l.Listener.Close()
}

// slowStats counts what the user-space relay moved: datagrams written to
// peers and read from peers by relay sockets.
type slowStats struct {
	toPeer, toClient counter
}

type counter struct{ packets, bytes atomic.Uint64 }

func (c *counter) add(n int) {
	c.packets.Add(1)
	c.bytes.Add(uint64(n))
}
