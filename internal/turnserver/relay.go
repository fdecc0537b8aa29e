package turnserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/pion/turn/v5"
)

// relayGenerator hands out relay sockets on the on-wire relay address of the
// requested family and advertises the external address (if one is set).
// pion reports the advertised address in its events; toWire maps it back.
type relayGenerator struct {
	relayIPs, externalIPs []netip.Addr
	minPort, maxPort      int
	ownListeners          map[netip.AddrPort]bool // never relay to these (loops)
	stats                 *slowStats
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
	lc := net.ListenConfig{Control: relayControl}
	for _, port := range g.ports(conf.RequestedPort) {
		conn, err := lc.ListenPacket(context.Background(), conf.Network, net.JoinHostPort(wire.String(), strconv.Itoa(port)))
		if err != nil {
			continue
		}
		return &relayConn{PacketConn: conn, own: g.ownListeners, stats: g.stats},
			&net.UDPAddr{IP: advertised.AsSlice(), Port: port}, nil
	}
	return nil, nil, fmt.Errorf("no free relay port in %d-%d", g.minPort, g.maxPort)
}

func (g *relayGenerator) AllocateListener(conf turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	wire, advertised, err := g.addresses(conf.Network)
	if err != nil {
		return nil, nil, err
	}
	lc := net.ListenConfig{}
	for _, port := range g.ports(conf.RequestedPort) {
		ln, err := lc.Listen(context.Background(), conf.Network, net.JoinHostPort(wire.String(), strconv.Itoa(port)))
		if err != nil {
			continue
		}
		return ln, &net.TCPAddr{IP: advertised.AsSlice(), Port: port}, nil
	}
	return nil, nil, fmt.Errorf("no free relay port in %d-%d", g.minPort, g.maxPort)
}

func (g *relayGenerator) AllocateConn(conf turn.AllocateConnConfig) (net.Conn, error) {
	var d net.Dialer
	if conf.LocalAddr != nil {
		if local, err := netip.ParseAddrPort(conf.LocalAddr.String()); err == nil {
			d.LocalAddr = net.TCPAddrFromAddrPort(g.toWire(local))
		}
	}
	return d.Dial(conf.Network, conf.RemoteAddr.String())
}

// relayConn is a relay socket that refuses to send to the server's own
// listening addresses (a client must not reach the TURN server through its
// own relay) and counts the datagrams user space relays.
type relayConn struct {
	net.PacketConn
	own   map[netip.AddrPort]bool
	stats *slowStats
}

var errOwnListener = errors.New("relay: refusing to send to the server's own listener")

func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if ap, err := netip.ParseAddrPort(addr.String()); err == nil && c.isOwn(ap) {
		return 0, errOwnListener
	}
	n, err := c.PacketConn.WriteTo(p, addr)
	if err == nil {
		c.stats.toPeer.add(n)
	}
	return n, err
}

func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.stats.toClient.add(n)
	}
	return n, addr, err
}

func (c *relayConn) isOwn(ap netip.AddrPort) bool {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if c.own[ap] {
		return true
	}
	// A wildcard listener owns its port on every local address.
	wild4, wild6 := netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port()), netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
	return (c.own[wild4] || c.own[wild6]) && isLocalAddr(ap.Addr())
}

func isLocalAddr(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil && pfx.Addr().Unmap() == a {
			return true
		}
	}
	return false
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
