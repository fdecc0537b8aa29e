// Package afxdp receives UDP datagrams through AF_XDP sockets instead of
// the kernel's UDP stack, behind a net.PacketConn that any pion
// application can use:
//
//	conn, err := afxdp.Listen("udp4", "10.0.0.1:5000")
//	settings.SetICEUDPMux(webrtc.NewICEUDPMux(nil, conn))
//
// An XDP classifier (bpf/xsk_rx.c) on the interfaces of the conn's address
// redirects the datagrams for the conns' ports to an AF_XDP socket per RX
// queue, each with its sender in a metadata prefix; a goroutine per socket
// hands them to the conn of their port, whose ReadFrom copies the payload
// out and gives the frame back. Sending goes through a normal UDP socket
// bound to the same address, which also receives whatever the classifier
// leaves to the kernel: fragments, IP options, oversized frames, partial
// checksums, datagrams the kernel would judge (a martian source, a
// reverse-path failure, another destination), and anything while the
// conn's reader holds every frame. So nothing is lost when AF_XDP cannot
// take a datagram; every such case is counted (Stats).
//
// The classifier and its sockets are shared by the conns of a network
// namespace: loaded with the first and removed with the last. The kernel
// has to run it in an interface's XDP hook, so an interface that already
// runs another XDP program cannot be used.
package afxdp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/xsk"
)

// Mode is how frames reach the UMEM: ModeCopy (every driver; the only one
// veth offers), ModeZeroCopy, or ModeAuto (zero-copy where supported).
type Mode = xsk.Mode

// Modes.
const (
	ModeAuto     = xsk.Auto
	ModeCopy     = xsk.Copy
	ModeZeroCopy = xsk.ZeroCopy
)

// ListenConfig says how to listen; the zero value serves.
type ListenConfig struct {
	// Interfaces the classifier runs on. Default: the interface holding
	// the bound address, or every interface that is up (but loopback) for
	// a wildcard address.
	Interfaces []string
	// Frames is the number of UMEM frames of each RX queue's socket: how
	// many datagrams may wait for the reader before the kernel socket
	// takes the next ones (default 4096).
	Frames int
	// Mode of the sockets (default ModeAuto).
	Mode Mode
	// Control, as in net.ListenConfig, runs on the kernel UDP socket
	// before it is bound.
	Control func(network, address string, c syscall.RawConn) error
}

func (lc *ListenConfig) frames() int {
	if lc.Frames == 0 {
		return 4096
	}
	return lc.Frames
}

// Listen listens as ListenConfig{} does.
func Listen(network, address string) (*Conn, error) {
	var lc ListenConfig
	return lc.ListenPacket(context.Background(), network, address)
}

// ListenPacket opens the kernel UDP socket (network "udp", "udp4" or
// "udp6"), then registers its port with the classifier. It must run in the
// network namespace of the address (as net.ListenPacket).
func (lc *ListenConfig) ListenPacket(ctx context.Context, network, address string) (_ *Conn, err error) {
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("afxdp: network %q (want udp, udp4 or udp6)", network)
	}
	if lc.Frames != 0 && (lc.Frames < 64 || lc.Frames&(lc.Frames-1) != 0) {
		return nil, fmt.Errorf("afxdp: Frames %d (want a power of two, at least 64)", lc.Frames)
	}
	pc, err := (&net.ListenConfig{Control: lc.Control}).ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c := &Conn{udp: pc.(*net.UDPConn), closing: make(chan struct{})}
	defer func() {
		if err != nil {
			c.udp.Close()
		}
	}()
	local := c.udp.LocalAddr().(*net.UDPAddr).AddrPort()
	c.v6Socket = local.Addr().Is6() && !local.Addr().Is4In6()
	bindings := bindingsFor(network, local)
	names := lc.Interfaces
	if len(names) == 0 {
		if names, err = interfacesFor(local.Addr().Unmap()); err != nil {
			return nil, err
		}
	}
	if c.ns, err = acquireNamespace(); err != nil {
		return nil, err
	}
	if err := c.attach(names, lc, bindings); err != nil {
		c.detach()
		return nil, err
	}
	c.readers.Add(1)
	go c.readKernel()
	return c, nil
}

// attach takes the interfaces (their sockets come first), then registers the port.
func (c *Conn) attach(names []string, lc *ListenConfig, bindings []binding) error {
	frames := 0
	var mask uint64
	for _, name := range names {
		it, err := c.ns.acquireIface(name, lc)
		if err != nil {
			return err
		}
		c.ifaces = append(c.ifaces, it)
		mask |= 1 << it.id
		for _, q := range it.queues {
			frames += q.sock.Frames()
		}
	}
	// Never full: at most every frame of every socket waits here.
	c.frames = make(chan frameRef, frames)
	c.kernel = make(chan kernelDatagram, 64)
	if len(c.ifaces) == 1 && len(c.ifaces[0].queues) == 1 {
		c.direct, c.descs, c.done = c.ifaces[0].queues[0], make([]xsk.Desc, 64), make([]uint64, 0, 64)
	} else {
		for _, it := range c.ifaces {
			c.ns.ensureRunners(it)
		}
	}
	for i := range bindings {
		bindings[i].port.Ifaces = mask
	}
	return c.ns.register(c, bindings)
}

func (c *Conn) detach() error {
	var errs []error
	if c.ns == nil {
		return nil
	}
	errs = append(errs, c.ns.unregister(c))
	c.closeDeliveries()
	for _, it := range c.ifaces {
		errs = append(errs, c.ns.releaseIface(it))
	}
	c.ifaces = nil
	errs = append(errs, c.ns.release())
	c.ns = nil
	return errors.Join(errs...)
}

// bindingsFor says where the socket is bound, for the classifier.
func bindingsFor(network string, local netip.AddrPort) []binding {
	addr := local.Addr().Unmap()
	v4 := binding{key: xskrxRxPortKey{Port: local.Port(), Family: unix.AF_INET}}
	v6 := binding{key: xskrxRxPortKey{Port: local.Port(), Family: unix.AF_INET6}}
	switch {
	case addr.Is4():
		v4.port.Any = b2u(addr.IsUnspecified())
		a := addr.As4()
		copy(v4.port.Addr.Bytes[:], a[:])
		return []binding{v4}
	case addr.IsUnspecified():
		v4.port.Any, v6.port.Any = 1, 1
		// "udp" on :: is dual-stack (Go clears IPV6_V6ONLY); "udp6" is not.
		if network == "udp" {
			return []binding{v4, v6}
		}
		return []binding{v6}
	}
	v6.port.Addr.Bytes = addr.As16()
	return []binding{v6}
}

// interfacesFor is the interface holding addr, or every up non-loopback
// interface for a wildcard.
func interfacesFor(addr netip.Addr) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("afxdp: interfaces: %w", err)
	}
	var names []string
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		if addr.IsUnspecified() {
			if ifi.Flags&net.FlagLoopback == 0 {
				names = append(names, ifi.Name)
			}
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, fmt.Errorf("afxdp: addresses of %s: %w", ifi.Name, err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, _ := netip.AddrFromSlice(n.IP); ip.Unmap() != addr {
				continue
			}
			if ifi.Flags&net.FlagLoopback != 0 {
				return nil, fmt.Errorf("afxdp: %s is on a loopback interface, which has no XDP driver hook", addr)
			}
			names = append(names, ifi.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("afxdp: no interface to receive %s on (ListenConfig.Interfaces names them)", addr)
	}
	return names, nil
}

// Conn is a UDP socket whose datagrams arrive through AF_XDP (or, where
// the classifier leaves them to the kernel, through the socket itself).
// It implements net.PacketConn and the AddrPort methods of *net.UDPConn.
type Conn struct {
	udp      *net.UDPConn
	v6Socket bool // report IPv4 senders as IPv4-mapped, as the kernel socket does
	ns       *namespace
	ifaces   []*iface
	keys     []xskrxRxPortKey // registered with the classifier
	slot     uint32

	frames chan frameRef       // from the AF_XDP sockets
	kernel chan kernelDatagram // from the kernel socket

	// direct is the conn's one queue when readers poll it (an interface
	// with one RX queue); descs are the reader's for polling.
	direct          *queue
	descs           []xsk.Desc
	done            []uint64 // frames ReadBatch read, for the fill ring (the poller's)
	polling, wakeup atomic.Bool

	mu      sync.RWMutex // held for reading while a frame is delivered or read
	closed  bool
	closing chan struct{}
	once    sync.Once
	readers sync.WaitGroup

	deadline deadline

	tx transmit // WriteBatch's

	viaXDP      atomic.Uint64
	viaKernel   atomic.Uint64
	badChecksum atomic.Uint64
	malformed   atomic.Uint64
}

type frameRef struct {
	q    *queue
	desc xsk.Desc
}

type kernelDatagram struct {
	buf  []byte
	from netip.AddrPort
}

// deliverFrame queues a frame for the reader; false if the conn is closed.
func (c *Conn) deliverFrame(q *queue, d xsk.Desc) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	select {
	case c.frames <- frameRef{q, d}:
		return true
	default:
		return false
	}
}

// closeDeliveries stops deliveries, waits for readers inside a frame,
// and gives back the frames still queued.
func (c *Conn) closeDeliveries() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for {
		select {
		case f := <-c.frames:
			f.q.recycle(f.desc.Addr)
		default:
			return
		}
	}
}

// readKernel feeds the datagrams the kernel socket receives to ReadFrom.
func (c *Conn) readKernel() {
	defer c.readers.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case c.kernel <- kernelDatagram{slices.Clone(buf[:n]), from}:
			c.wake()
		case <-c.closing:
			return
		}
	}
}

// ReadFromUDPAddrPort reads the next datagram, from either path.
func (c *Conn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	n, from, _, err := c.ReadWithArrival(b)
	return n, from, err
}

// ReadWithArrival reads the next datagram and when it arrived: the
// CLOCK_MONOTONIC nanoseconds at which the classifier saw its frame (0 for
// a datagram that took the kernel socket).
func (c *Conn) ReadWithArrival(b []byte) (int, netip.AddrPort, uint64, error) {
	for {
		f, d, err := c.next()
		if err != nil {
			return 0, netip.AddrPort{}, 0, err
		}
		if d != nil {
			c.viaKernel.Add(1)
			return copy(b, d.buf), d.from, 0, nil
		}
		if n, from, arrival, ok := c.readFrame(f, b); ok {
			return n, from, arrival, nil
		}
	}
}

// next is the next frame, or datagram from the kernel socket, for the
// reader: queued ones first, then, on a polled queue, what the reader
// finds polling it (if no other reader does), else what others queue.
func (c *Conn) next() (frameRef, *kernelDatagram, error) {
	tokenFreed := false
	for {
		if !tokenFreed {
			select {
			case <-c.closing:
				return frameRef{}, nil, net.ErrClosed
			case f := <-c.frames:
				return f, nil, nil
			case d := <-c.kernel:
				return frameRef{}, &d, nil
			default:
			}
		}
		// Told the token is free, a reader tries it before anything else:
		// returning without would leave the others waiting with no poller.
		tokenFreed = false
		if q := c.direct; q != nil && q.pollMu.TryLock() {
			f, ok, err := c.poll(q)
			q.release()
			if err != nil || ok {
				return f, nil, err
			}
			continue
		}
		var free <-chan struct{}
		if c.direct != nil {
			free = c.direct.free
		}
		expired, changed := c.deadline.wait()
		select {
		case <-c.closing:
			return frameRef{}, nil, net.ErrClosed
		case f := <-c.frames:
			return f, nil, nil
		case d := <-c.kernel:
			return frameRef{}, &d, nil
		case <-expired:
			return frameRef{}, nil, os.ErrDeadlineExceeded
		case <-changed:
		case <-free:
			tokenFreed = true
		}
	}
}

// poll consumes q's RX ring as its poller until a frame for c comes
// (ok), handing the others on; it returns without one when the reader is
// wanted elsewhere (a datagram from the kernel socket, close, a new
// deadline: wake) or the deadline passes.
func (c *Conn) poll(q *queue) (frameRef, bool, error) {
	for {
		if q.stopping.Load() {
			return frameRef{}, false, net.ErrClosed
		}
		if f, ok := c.receive(q); ok {
			return f, true, nil
		}
		if len(c.frames) > 0 { // queued ones first (next takes them)
			return frameRef{}, false, nil
		}
		dl := c.deadline.when()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return frameRef{}, false, os.ErrDeadlineExceeded
		}
		_ = q.sock.SetReadDeadline(dl)
		// Dekker with wake: one of us sees the other's store.
		c.polling.Store(true)
		// Frames another poller queued before it let the token go are
		// in c.frames by now (the mutex orders them).
		if c.wakeup.Swap(false) || len(c.frames) > 0 || len(c.kernel) > 0 {
			c.polling.Store(false)
			return frameRef{}, false, nil
		}
		err := q.raw.Read(func(uintptr) bool {
			return q.sock.Pending() > 0 || c.wakeup.Load() || q.stopping.Load()
		})
		c.polling.Store(false)
		if c.wakeup.Swap(false) {
			return frameRef{}, false, nil
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return frameRef{}, false, err
		}
	}
}

// receive takes what q's RX ring holds: the first frame for c is returned,
// the rest queued for their conns (c's own behind it, in order). If frames
// for c are queued already (by the poller before), c's new ones queue
// behind them: returned first, a new frame would overtake them.
func (c *Conn) receive(q *queue) (frameRef, bool) {
	var mine frameRef
	found := false
	queued := len(c.frames) > 0 // only c takes from it, and c is here
	n := q.sock.Receive(c.descs)
	for _, d := range c.descs[:n] {
		to := q.route(d)
		if to == c && !found && !queued {
			mine, found = frameRef{q, d}, true
			continue
		}
		q.handOn(to, d)
	}
	return mine, found
}

// wake brings the reader out of poll (if it polls) to look at its queues.
func (c *Conn) wake() {
	c.wakeup.Store(true)
	if c.polling.Load() {
		_ = c.direct.sock.Interrupt()
	}
}

// readFrame copies a frame's payload out, checks it as the kernel would,
// and gives the frame back.
func (c *Conn) readFrame(f frameRef, b []byte) (int, netip.AddrPort, uint64, bool) {
	m := Message{Buf: b}
	ok := c.readInto(&m, f)
	return m.N, m.Addr, m.Arrival, ok
}

var (
	errChecksum  = errors.New("afxdp: UDP checksum mismatch")
	errMalformed = errors.New("afxdp: frame without the classifier's metadata")
)

// parseFrame reads the metadata prefix and the UDP header (struct rx_meta
// in bpf/xsk_rx.h) and verifies the UDP checksum, as the kernel would.
func parseFrame(frame []byte, v6Socket bool) (netip.AddrPort, []byte, error) {
	if !metaOK(frame) {
		return netip.AddrPort{}, nil, errMalformed
	}
	udp := frame[metaSize:]
	// Longer is Ethernet padding after a short IPv4 datagram (the IP
	// total length, which the classifier checked, leaves it out).
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < 8 || ulen > len(udp) {
		return netip.AddrPort{}, nil, errMalformed
	}
	udp = udp[:ulen]
	var addr netip.Addr
	switch frame[metaFamily] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(frame[metaAddr:]))
		if v6Socket {
			addr = netip.AddrFrom16(addr.As16())
		}
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(frame[metaAddr:]))
	default:
		return netip.AddrPort{}, nil, errMalformed
	}
	if binary.BigEndian.Uint16(udp[6:]) != 0 && !checksumOK(binary.NativeEndian.Uint16(frame[metaPseudo:]), udp) {
		return netip.AddrPort{}, nil, errChecksum
	}
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(udp[0:])), udp[8:], nil
}

// checksumOK sums the UDP header and data onto the classifier's
// pseudo-header sum, in memory order as it does: a sound datagram folds
// to all ones.
func checksumOK(pseudo uint16, udp []byte) bool {
	return fold(sumNative(udp, uint64(pseudo))) == 0xffff
}

// ReadFrom reads the next datagram (net.PacketConn).
func (c *Conn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.ReadFromUDPAddrPort(b)
	if err != nil {
		return 0, nil, err
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

// WriteTo sends b as WriteBatch sends a batch of one: through the TX ring
// where the kernel would send the same frame, else the kernel socket.
func (c *Conn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return c.udp.WriteTo(b, addr) // the kernel socket's error
	}
	return c.WriteToUDPAddrPort(b, ua.AddrPort())
}

// WriteToUDPAddrPort sends b as WriteTo does.
func (c *Conn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	ms := [1]Message{{Buf: b, Addr: addr}}
	if _, err := c.WriteBatch(ms[:]); err != nil {
		return 0, err
	}
	return len(b), nil
}

// ReadFromAddrPort is ReadFromUDPAddrPort under the name pion/ice's
// AddrPortReaderWriter has: its UDP mux then reads (and writes) without
// a net.UDPAddr per datagram, as on a *net.UDPConn.
func (c *Conn) ReadFromAddrPort(b []byte) (int, netip.AddrPort, error) {
	return c.ReadFromUDPAddrPort(b)
}

// WriteToAddrPort is WriteToUDPAddrPort (pion/ice's AddrPortReaderWriter).
func (c *Conn) WriteToAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	return c.WriteToUDPAddrPort(b, addr)
}

// KernelConn is the kernel socket: for sending (sendmmsg included) and
// socket options. Reading it takes datagrams away from ReadFrom; closing
// the Conn closes it.
func (c *Conn) KernelConn() *net.UDPConn { return c.udp }

// LocalAddr is the bound address.
func (c *Conn) LocalAddr() net.Addr { return c.udp.LocalAddr() }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.deadline.set(t)
	c.wake()
	return c.udp.SetWriteDeadline(t)
}

// SetReadDeadline makes a waiting or later ReadFrom fail after t.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.deadline.set(t)
	c.wake()
	return nil
}

// SetWriteDeadline is the kernel socket's.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.udp.SetWriteDeadline(t) }

// SyscallConn is the kernel socket's (for socket options).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.udp.SyscallConn() }

// Close unregisters the port (the last conn of the namespace removes the
// classifier) and closes the socket.
func (c *Conn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		close(c.closing)
		c.wake()
		err = c.udp.Close()
		c.readers.Wait()
		err = errors.Join(err, c.detach())
	})
	return err
}

// deadline is a read deadline that waiting readers follow as it changes.
type deadline struct {
	mu      sync.Mutex
	t       time.Time
	timer   *time.Timer
	expired chan struct{} // closed when the deadline passes
	changed chan struct{} // closed when it is set again
}

func (d *deadline) wait() (expired, changed <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.expired, d.changed
}

func (d *deadline) when() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.t
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.t = t
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
	d.expired = nil
	if t.IsZero() {
		return
	}
	ch := make(chan struct{})
	d.expired = ch
	if wait := time.Until(t); wait <= 0 {
		close(ch)
	} else {
		d.timer = time.AfterFunc(wait, func() { close(ch) })
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
