package restart

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/ebrtc/ebrtc/internal/sockopt"
)

// The listening sockets are opened here: a successor takes its
// predecessor's, and a hand-over sends them all.

// udpSocket is one of pion's PacketConnConfigs: which listener it serves.
type udpSocket struct {
	addr    netip.AddrPort
	ordinal int          // among the SO_REUSEPORT sockets of addr
	conn    *net.UDPConn // nil for AF_XDP listeners, which are not handed over
}

// tcpSocket is a tcp:// or tls:// listening socket.
type tcpSocket struct {
	scheme string
	addr   netip.AddrPort
	ln     *net.TCPListener
}

// ListenUDP opens a UDP listener's SO_REUSEPORT group of n sockets, or
// takes the predecessor's whole group: an allocation stays with its
// socket's index, and SO_REUSEPORT sends a client to the same index only
// in a group of the same size. Each socket is one of pion's
// PacketConnConfigs, in the order of the calls.
func (l *Lifecycle) ListenUDP(network string, addr netip.AddrPort, n int) ([]*net.UDPConn, error) {
	if saved := l.inheritedUDPCount(addr); saved > 0 {
		n = saved
	}
	conns := make([]*net.UDPConn, 0, n)
	for ordinal := range n {
		conn, err := l.listenUDP(network, addr, ordinal)
		if err != nil {
			return nil, err
		}
		l.udp = append(l.udp, udpSocket{addr: addr, ordinal: ordinal, conn: conn})
		conns = append(conns, conn)
	}
	return conns, nil
}

// listenUDP is the ordinal-th socket of a UDP listener: inherited, or new.
func (l *Lifecycle) listenUDP(network string, addr netip.AddrPort, ordinal int) (*net.UDPConn, error) {
	if f := l.inheritedFile("udp", addr, ordinal); f != nil {
		conn, err := l.adopt(f, addr)
		if err != nil {
			return nil, fmt.Errorf("hand-over: udp://%s: %w", addr, err)
		}
		return conn.(*net.UDPConn), nil
	}
	lc := net.ListenConfig{Control: sockopt.ControlWith(sockopt.ReusePort, sockopt.UDPBuffers, l.cfg.Guard)}
	conn, err := lc.ListenPacket(context.Background(), "udp"+network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen udp://%s: %w", addr, err)
	}
	return conn.(*net.UDPConn), nil
}

// AddAFXDP counts a UDP listener read through AF_XDP among pion's
// PacketConnConfigs; its socket belongs to this process (no hand-over).
func (l *Lifecycle) AddAFXDP(addr netip.AddrPort) {
	l.udp = append(l.udp, udpSocket{addr: addr})
}

// ListenTCP opens a tcp:// or tls:// listener's socket: inherited, or new.
func (l *Lifecycle) ListenTCP(scheme, network string, addr netip.AddrPort) (*net.TCPListener, error) {
	ln, err := l.listenTCP(scheme, network, addr)
	if err != nil {
		return nil, err
	}
	l.tcp = append(l.tcp, tcpSocket{scheme: scheme, addr: addr, ln: ln})
	return ln, nil
}

func (l *Lifecycle) listenTCP(scheme, network string, addr netip.AddrPort) (*net.TCPListener, error) {
	if f := l.inheritedFile(scheme, addr, 0); f != nil {
		ln, err := adoptListener(f, addr)
		if err != nil {
			return nil, fmt.Errorf("hand-over: %s://%s: %w", scheme, addr, err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp"+network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen %s://%s: %w", scheme, addr, err)
	}
	return ln.(*net.TCPListener), nil
}

// AddDTLS counts a dtls:// listener, which a hand-over closes.
func (l *Lifecycle) AddDTLS(ln net.Listener) {
	l.dtls = append(l.dtls, ln)
	l.hasDTLS = true
}

// adopt makes a socket sent along (a listener's or a relay socket) one of
// this process's.
func (l *Lifecycle) adopt(f *os.File, want netip.AddrPort) (net.PacketConn, error) {
	conn, err := net.FilePacketConn(f)
	if err == nil {
		err = checkBound(conn.LocalAddr(), want)
	}
	if err == nil {
		// The predecessor's source guard goes with it: attach ours.
		err = l.attachGuard(conn)
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	return conn, nil
}

// adoptListener makes a listening socket sent along one of this
// process's, checked as adopt checks the others.
func adoptListener(f *os.File, want netip.AddrPort) (*net.TCPListener, error) {
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	tcp, ok := ln.(*net.TCPListener)
	if !ok {
		err = fmt.Errorf("socket sent for %v is not a TCP listener (%v)", want, ln.Addr())
	} else {
		err = checkBound(tcp.Addr(), want)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	return tcp, nil
}

// checkBound makes sure a socket sent along is bound where the state says:
// descriptors matched by index must not be taken for another's.
func checkBound(local net.Addr, want netip.AddrPort) error {
	if got := addrPort(local); got != want {
		return fmt.Errorf("socket sent for %v is bound at %v", want, got)
	}
	return nil
}

// attachGuard sets an inherited socket up as a new one: buffers, guard.
func (l *Lifecycle) attachGuard(conn net.PacketConn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return sockopt.ControlWith(sockopt.UDPBuffers, l.cfg.Guard)("", "", rc)
}

// gatedConns are the UDP sockets read through the gate.
func (l *Lifecycle) gatedConns() []net.PacketConn {
	var out []net.PacketConn
	for _, u := range l.udp {
		if u.conn != nil {
			out = append(out, u.conn)
		}
	}
	return append(out, l.host.RelayConns()...)
}

// gatedSockets wake the gate's readers and acceptors.
func (l *Lifecycle) gatedSockets() []wakeFunc {
	var out []wakeFunc
	for _, c := range l.gatedConns() {
		out = append(out, c.SetReadDeadline)
	}
	for _, t := range l.tcp {
		out = append(out, t.ln.SetDeadline)
	}
	return out
}

// udpIndex finds the PacketConnConfig serving a saved UDP listener.
func (l *Lifecycle) udpIndex(s savedListener) int {
	for i, u := range l.udp {
		if u.addr == s.Addr && u.ordinal == s.Ordinal {
			return i
		}
	}
	return -1
}

func (u udpSocket) localAddr() net.Addr {
	if u.conn != nil {
		return u.conn.LocalAddr()
	}
	return net.UDPAddrFromAddrPort(u.addr)
}
