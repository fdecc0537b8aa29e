package turnserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
	"github.com/ebrtc/ebrtc/internal/sockopt"
	"github.com/ebrtc/ebrtc/internal/turnserver/restart"
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
	guard                 sockopt.Control // attaches the source guard to relay sockets (nil: none)
	gate                  *restart.Gate   // holds relay sockets' readers for a hand-over
	users                 userTraffic     // what ended allocations relayed, per user

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

// ports yields the requested port (if inside the range: a reservation or
// EVEN-PORT asks for one), or random ports of the range, at most 64 tries.
func (g *relayGenerator) ports(requested int) []int {
	if requested != 0 {
		if requested < g.minPort || requested > g.maxPort {
			return nil
		}
		return []int{requested}
	}
	n := min(64, g.maxPort-g.minPort+1)
	out := make([]int, n)
	for i := range out {
		out[i] = g.minPort + rand.IntN(g.maxPort-g.minPort+1)
	}
	return out
}

// bindRelay reserves a port of the range in the live set and binds it with
// bind, trying up to 64 ports; a port another socket holds is skipped.
func (g *relayGenerator) bindRelay(wire netip.Addr, requested int, tcp bool, bind func(addr string) error) (netip.AddrPort, error) {
	lastErr := errors.New("no port to try")
	for _, port := range g.ports(requested) {
		addr := netip.AddrPortFrom(wire, uint16(port))
		if !g.live.reserve(addr, tcp) {
			continue // another allocation's
		}
		if lastErr = bind(addr.String()); lastErr == nil {
			return addr, nil
		}
		g.live.remove(addr, tcp)
	}
	return netip.AddrPort{}, fmt.Errorf("no free relay port in %d-%d (last try: %w)", g.minPort, g.maxPort, lastErr)
}

func (g *relayGenerator) AllocatePacketConn(conf turn.AllocateListenerConfig) (net.PacketConn, net.Addr, error) {
	wire, advertised, err := g.addresses(conf.Network)
	if err != nil {
		return nil, nil, err
	}
	var conn net.PacketConn
	addr, err := g.bindRelay(wire, conf.RequestedPort, false, func(a string) (err error) {
		conn, err = g.listenPacket(conf.Network, a)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return g.newRelayConn(conn, addr, conf.UserID), &net.UDPAddr{IP: advertised.AsSlice(), Port: int(addr.Port())}, nil
}

// listenPacket binds a relay socket.
func (g *relayGenerator) listenPacket(network, addr string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: sockopt.ControlWith(sockopt.UDPBuffers, g.guard)}
	return lc.ListenPacket(context.Background(), network, addr)
}

// newRelayConn makes conn, bound at addr (reserved in the live set), an
// allocation's relay socket.
func (g *relayGenerator) newRelayConn(conn net.PacketConn, addr netip.AddrPort, user string) *relayConn {
	rc := &relayConn{PacketConn: conn, gen: g, addr: addr, user: user, perms: map[netip.Addr]bool{}, reader: g.gate.Reader()}
	g.live.setConn(addr, rc)
	return rc
}

func (g *relayGenerator) AllocateListener(conf turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	wire, advertised, err := g.addresses(conf.Network)
	if err != nil {
		return nil, nil, err
	}
	// SO_REUSEPORT: RFC 6062 connections to peers leave from this same
	// address and port (AllocateConn), which Linux allows only when every
	// socket bound there sets it. It would also let two listeners share a
	// port (and split its incoming connections), so the port must be free:
	// not another allocation's (the live set), and not bound by anyone else
	// (a first bind without the option).
	lc := net.ListenConfig{Control: sockopt.ReusePort}
	var ln net.Listener
	addr, err := g.bindRelay(wire, conf.RequestedPort, true, func(a string) error {
		probe, err := net.Listen(conf.Network, a)
		if err != nil {
			return err
		}
		probe.Close()
		ln, err = lc.Listen(context.Background(), conf.Network, a)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return &relayListener{Listener: ln, gen: g, addr: addr}, &net.TCPAddr{IP: advertised.AsSlice(), Port: int(addr.Port())}, nil
}

var errRefusedPeer = errors.New("relay: peer refused")

// connectTimeout bounds an RFC 6062 Connect ("at least 30 seconds").
const connectTimeout = 30 * time.Second

// AllocateConn opens an RFC 6062 connection to a peer from the allocation's
// relay address (its listener's port).
func (g *relayGenerator) AllocateConn(conf turn.AllocateConnConfig) (net.Conn, error) {
	remote := addrPort(conf.RemoteAddr)
	if !g.peerAllowed(remote, true) {
		g.events.Dropped.WithLabelValues("refused_peer").Inc()
		return nil, fmt.Errorf("%w: %v", errRefusedPeer, remote)
	}
	d := net.Dialer{Control: sockopt.ReusePort, Timeout: connectTimeout}
	if conf.LocalAddr != nil {
		if local, err := netip.ParseAddrPort(conf.LocalAddr.String()); err == nil {
			d.LocalAddr = net.TCPAddrFromAddrPort(g.toWire(local))
		}
	}
	return d.Dial(conf.Network, conf.RemoteAddr.String())
}

// permission follows pion's permission events for the relay socket at
// relay (as pion reports it: the advertised address), so the socket can drop
// what pion would drop before it costs anything.
func (g *relayGenerator) permission(relay net.Addr, peer net.IP, ok bool) {
	if _, udp := relay.(*net.UDPAddr); !udp {
		return
	}
	c := g.live.conn(g.toWire(addrPort(relay)))
	if ip, valid := netip.AddrFromSlice(peer); valid && c != nil {
		c.permit(ip.Unmap(), ok)
	}
}

// liveRelays are the relay addresses with an open socket, by transport,
// and the UDP ones' relayConn.
type liveRelays struct {
	mu  sync.Mutex
	udp map[netip.AddrPort]*relayConn // nil while being bound
	tcp map[netip.AddrPort]bool
}

// reserve takes a for a socket about to be bound; false if it is taken.
func (l *liveRelays) reserve(a netip.AddrPort, tcp bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.udp == nil {
		l.udp, l.tcp = map[netip.AddrPort]*relayConn{}, map[netip.AddrPort]bool{}
	}
	if tcp {
		if l.tcp[a] {
			return false
		}
		l.tcp[a] = true
		return true
	}
	if _, taken := l.udp[a]; taken {
		return false
	}
	l.udp[a] = nil
	return true
}

func (l *liveRelays) setConn(a netip.AddrPort, c *relayConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.udp[a] = c
}

func (l *liveRelays) conn(a netip.AddrPort) *relayConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.udp[a]
}

func (l *liveRelays) remove(a netip.AddrPort, tcp bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tcp {
		delete(l.tcp, a)
	} else {
		delete(l.udp, a)
	}
}

// conns are the UDP relay sockets.
func (l *liveRelays) conns() []net.PacketConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]net.PacketConn, 0, len(l.udp))
	for _, c := range l.udp {
		if c != nil {
			out = append(out, c.PacketConn)
		}
	}
	return out
}

func (l *liveRelays) has(a netip.AddrPort, tcp bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tcp {
		return l.tcp[a]
	}
	_, ok := l.udp[a]
	return ok
}

// relayConn is an allocation's UDP relay socket. It sends only to peers
// peerAllowed accepts (so no client reaches the host's own services, nor the
// TURN server through its own relay); it takes datagrams only from peers
// with a permission (as pion would) that are not the host's own non-relay
// sockets (a host service answering a forged request); it keeps the
// allocation within its bandwidth limit in each direction, charged only for
// what would be relayed; and it counts what it relays. Datagrams forged from
// our own addresses are dropped before it by the source guard (package
// sourceguard), when that could load.
type relayConn struct {
	net.PacketConn
	gen              *relayGenerator
	addr             netip.AddrPort // on the wire
	toPeer, toClient ratelimit.Bucket
	closeOnce        sync.Once
	reader           restart.Reader
	user             string
	traffic          allocTraffic

	mu    sync.RWMutex
	perms map[netip.Addr]bool
}

func (c *relayConn) permit(ip netip.Addr, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.perms[ip] = true
	} else {
		delete(c.perms, ip)
	}
}

func (c *relayConn) permitted(ip netip.Addr) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.perms[ip]
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
		c.traffic.slow.toPeer.add(n)
	}
	return n, err
}

func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.reader.Read(c.PacketConn, p)
		if err != nil {
			return n, addr, err
		}
		if reason := c.refuse(addrPort(addr)); reason != "" {
			c.gen.events.Dropped.WithLabelValues(reason).Inc()
			continue
		}
		if !c.toClient.Take(c.gen.limit, n, ratelimit.Now()) {
			c.gen.events.Dropped.WithLabelValues("rate_limit").Inc()
			continue
		}
		c.gen.stats.toClient.add(n)
		c.traffic.slow.toClient.add(n)
		return n, addr, nil
	}
}

// refuse says why a datagram from src is not relayed to the client, or "".
func (c *relayConn) refuse(src netip.AddrPort) string {
	switch {
	case !c.permitted(src.Addr()):
		return "no_permission"
	case c.gen.policy.IsOwn(src.Addr()) && !c.gen.live.has(src, false):
		return "refused_peer"
	}
	return ""
}

func (c *relayConn) Close() error {
	c.closeOnce.Do(func() {
		// Retired first: a snapshot between the two finds it in one place.
		fast, slow := c.traffic.total()
		c.gen.users.retire(c.user, fast, slow)
		c.gen.live.remove(c.addr, false)
	})
	return c.PacketConn.Close()
}

// relayListener is an RFC 6062 allocation's listener; it is live until
// closed. Connections from our own relay addresses come only from live
// relay sockets (another allocation's Connect): anything else there is a
// service of the host, which a client must not talk to.
type relayListener struct {
	net.Listener
	gen       *relayGenerator
	addr      netip.AddrPort
	closeOnce sync.Once
}

func (l *relayListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if src := addrPort(c.RemoteAddr()); l.gen.policy.IsOwn(src.Addr()) && !l.gen.live.has(src, true) {
			l.gen.events.Dropped.WithLabelValues("refused_peer").Inc()
			c.Close()
			continue
		}
		return c, nil
	}
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
