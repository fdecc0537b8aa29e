// Package xsk is an AF_XDP socket in Go, on the kernel's documented ABI
// (Documentation/networking/af_xdp.rst) through golang.org/x/sys/unix: a
// UMEM of fixed-size frames, its fill and completion rings, the socket's RX
// and TX rings, XDP_USE_NEED_WAKEUP, and copy or zero-copy binding to one
// RX queue of one interface.
//
// A socket owns its UMEM (no XDP_SHARED_UMEM): the first Frames frames are
// for receiving (the caller hands them to the kernel with Fill and gets
// them back from Receive), the next TXFrames for sending (managed here).
// A Socket is not safe for concurrent use: RX and TX may be driven from two
// goroutines, each side from one.
package xsk

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mode is how frames move between the driver and the UMEM.
type Mode int

const (
	// Auto binds zero-copy where the driver supports it, copy otherwise.
	Auto Mode = iota
	// Copy has the kernel copy each frame into (or out of) the UMEM; every
	// driver supports it, and XDP on a veth offers nothing else.
	Copy
	// ZeroCopy has the driver DMA into the UMEM; an error where unsupported.
	ZeroCopy
)

func (m Mode) String() string {
	switch m {
	case Copy:
		return "copy"
	case ZeroCopy:
		return "zero-copy"
	}
	return "auto"
}

// Config sizes a socket. Zero values take the defaults.
type Config struct {
	Frames    int  // receive frames in the UMEM (power of two; default 4096)
	FrameSize int  // bytes per frame, 2048 or 4096 (default 2048)
	TXFrames  int  // send frames (power of two, or 0: no TX ring; default 0)
	Mode      Mode // default Auto
	// NoNeedWakeup turns XDP_USE_NEED_WAKEUP off: the kernel then never
	// asks for a syscall, and sending always makes one.
	NoNeedWakeup bool
}

func (c *Config) defaults() error {
	if c.Frames == 0 {
		c.Frames = 4096
	}
	if c.FrameSize == 0 {
		c.FrameSize = 2048
	}
	if !powerOfTwo(c.Frames) {
		return fmt.Errorf("xsk: frames %d is not a power of two", c.Frames)
	}
	if c.TXFrames != 0 && !powerOfTwo(c.TXFrames) {
		return fmt.Errorf("xsk: TX frames %d is not a power of two", c.TXFrames)
	}
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return fmt.Errorf("xsk: frame size %d (want 2048 or 4096)", c.FrameSize)
	}
	return nil
}

func powerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// Desc is a frame handed over on the RX or TX ring: its address in the
// UMEM (where the data starts) and length.
type Desc = unix.XDPDesc

// Socket is a bound AF_XDP socket.
type Socket struct {
	fd       int
	file     *os.File // the fd, registered with Go's poller
	cfg      Config
	umem     []byte
	fill     *ring
	comp     *ring
	rx       *ring
	tx       *ring
	zeroCopy bool
	txFree   []uint64 // send frames not in flight
}

// Open creates a socket bound to queue of the interface ifindex (in the
// calling thread's network namespace).
func Open(ifindex, queue int, cfg Config) (_ *Socket, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("xsk: socket: %w", err)
	}
	s := &Socket{fd: fd, cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.registerUMEM(); err != nil {
		return nil, err
	}
	if err := s.mapRings(); err != nil {
		return nil, err
	}
	if err := s.bind(ifindex, queue); err != nil {
		return nil, err
	}
	for i := range cfg.TXFrames {
		s.txFree = append(s.txFree, uint64((cfg.Frames+i)*cfg.FrameSize))
	}
	s.file = os.NewFile(uintptr(fd), "xsk")
	return s, nil
}

func (s *Socket) registerUMEM() error {
	size := (s.cfg.Frames + s.cfg.TXFrames) * s.cfg.FrameSize
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xsk: UMEM of %d bytes: %w", size, err)
	}
	s.umem = mem
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint64(size), Size: uint32(s.cfg.FrameSize)}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		if errors.Is(err, unix.ENOBUFS) { // (xdp_umem_account_pages)
			return fmt.Errorf("xsk: register a UMEM of %d KiB: over the locked-memory limit (raise RLIMIT_MEMLOCK: ulimit -l, systemd's LimitMEMLOCK=; or grant CAP_IPC_LOCK): %w", size>>10, err)
		}
		return fmt.Errorf("xsk: register UMEM: %w", err)
	}
	return nil
}

func (s *Socket) mapRings() error {
	frames := uint32(s.cfg.Frames)
	sizes := []struct {
		opt  int
		size uint32
	}{
		{unix.XDP_UMEM_FILL_RING, frames},
		{unix.XDP_UMEM_COMPLETION_RING, max(uint32(s.cfg.TXFrames), 1)},
		// The RX ring holds every receive frame: it is never full, so a
		// redirect fails only for want of a fill frame, which the
		// classifier's credits foresee.
		{unix.XDP_RX_RING, frames},
	}
	if s.cfg.TXFrames > 0 {
		sizes = append(sizes, struct {
			opt  int
			size uint32
		}{unix.XDP_TX_RING, uint32(s.cfg.TXFrames)})
	}
	for _, r := range sizes {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, int(r.size)); err != nil {
			return fmt.Errorf("xsk: ring size (option %d): %w", r.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(s.fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("xsk: ring offsets: %w", err)
	}
	var err error
	descSize := unsafe.Sizeof(unix.XDPDesc{})
	if s.fill, err = mapRing(s.fd, off.Fr, frames, 8, unix.XDP_UMEM_PGOFF_FILL_RING); err != nil {
		return fmt.Errorf("xsk: map fill ring: %w", err)
	}
	if s.comp, err = mapRing(s.fd, off.Cr, max(uint32(s.cfg.TXFrames), 1), 8, unix.XDP_UMEM_PGOFF_COMPLETION_RING); err != nil {
		return fmt.Errorf("xsk: map completion ring: %w", err)
	}
	if s.rx, err = mapRing(s.fd, off.Rx, frames, descSize, unix.XDP_PGOFF_RX_RING); err != nil {
		return fmt.Errorf("xsk: map RX ring: %w", err)
	}
	if s.cfg.TXFrames > 0 {
		if s.tx, err = mapRing(s.fd, off.Tx, uint32(s.cfg.TXFrames), descSize, unix.XDP_PGOFF_TX_RING); err != nil {
			return fmt.Errorf("xsk: map TX ring: %w", err)
		}
	}
	return nil
}

func (s *Socket) bind(ifindex, queue int) error {
	var flags uint16
	if !s.cfg.NoNeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	switch s.cfg.Mode {
	case Copy:
		flags |= unix.XDP_COPY
	case ZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	err := unix.Bind(s.fd, sa)
	// A socket closed on this queue a moment ago still holds it: the kernel
	// releases its buffer pool from a work queue.
	for wait := time.Now().Add(time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
		err = unix.Bind(s.fd, sa)
	}
	if err != nil {
		if s.cfg.Mode == ZeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT)) {
			return fmt.Errorf("xsk: bind to ifindex %d queue %d: the driver has no zero-copy mode: %w", ifindex, queue, err)
		}
		return fmt.Errorf("xsk: bind to ifindex %d queue %d (%s): %w", ifindex, queue, s.cfg.Mode, err)
	}
	var opts struct{ flags uint32 }
	if err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err != nil {
		return fmt.Errorf("xsk: options: %w", err)
	}
	s.zeroCopy = opts.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
	return nil
}

// FD is the socket, for the XSK map.
func (s *Socket) FD() int { return s.fd }

// ZeroCopy says which mode the kernel bound: zero-copy or copy.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// Mode is the bound mode, Copy or ZeroCopy.
func (s *Socket) Mode() Mode {
	if s.zeroCopy {
		return ZeroCopy
	}
	return Copy
}

// Frames is the number of receive frames; RXFrame(i) is the address of the i-th.
func (s *Socket) Frames() int { return s.cfg.Frames }

// RXFrame is the UMEM address of receive frame i, for Fill.
func (s *Socket) RXFrame(i int) uint64 { return uint64(i * s.cfg.FrameSize) }

// FrameSize is the bytes per UMEM frame.
func (s *Socket) FrameSize() int { return s.cfg.FrameSize }

// MaxFrame is the longest frame the kernel puts in a receive frame: the
// frame less the headroom it keeps in front (XDP_PACKET_HEADROOM).
func (s *Socket) MaxFrame() int { return s.cfg.FrameSize - unix.XDP_PACKET_HEADROOM }

// Fill hands receive frames to the kernel; it returns how many the fill
// ring took (all unless more than Frames are outstanding).
func (s *Socket) Fill(addrs ...uint64) int {
	n := s.fill.free(uint32(len(addrs)))
	for i := range n {
		*s.fill.addr(s.fill.cachedProd + i) = addrs[i] &^ uint64(s.cfg.FrameSize-1)
	}
	s.fill.submit(n)
	if n > 0 && s.fill.needsWakeup() {
		// Zero-copy drivers sleep on an empty fill ring until woken.
		_, _, _ = unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
	return int(n)
}

// Receive takes up to len(descs) received frames off the RX ring; the
// frames are the caller's until it gives them back with Fill.
func (s *Socket) Receive(descs []Desc) int {
	n := s.rx.avail(uint32(len(descs)))
	for i := range n {
		descs[i] = *s.rx.desc(s.rx.cachedCons + i)
	}
	s.rx.release(n)
	return int(n)
}

// Pending is how many received frames wait on the RX ring.
func (s *Socket) Pending() int { return int(s.rx.avail(s.rx.size)) }

// Frame is a received (or sent) frame's bytes, inside the UMEM: valid until
// the frame is handed back.
func (s *Socket) Frame(d Desc) ([]byte, error) {
	end := d.Addr + uint64(d.Len)
	if d.Len == 0 || end > uint64(len(s.umem)) || d.Addr/uint64(s.cfg.FrameSize) != (end-1)/uint64(s.cfg.FrameSize) {
		return nil, fmt.Errorf("xsk: descriptor %d+%d outside a frame", d.Addr, d.Len)
	}
	return s.umem[d.Addr:end:end], nil
}

// Send copies p into a free send frame and queues it on the TX ring,
// then wakes the kernel if it asks (always in copy mode). It reclaims
// completed frames first.
func (s *Socket) Send(p []byte) error {
	if s.tx != nil && len(p) > s.cfg.FrameSize {
		return fmt.Errorf("xsk: %d bytes exceed a %d-byte frame", len(p), s.cfg.FrameSize)
	}
	n, err := s.SendFrames(1, func(_ int, frame []byte) int { return copy(frame, p) })
	if err == nil && n == 0 {
		return unix.ENOBUFS
	}
	return err
}

// SendFrames queues up to n frames on the TX ring, frame i written by
// fill into a free send frame (FrameSize bytes; it returns the length),
// and wakes the kernel once they are all queued. It reclaims completed
// frames first, and returns how many it queued: fewer than n when the
// send frames or the ring run out (the kernel has not completed them).
func (s *Socket) SendFrames(n int, fill func(i int, frame []byte) int) (int, error) {
	if s.tx == nil {
		return 0, errors.New("xsk: no TX ring (Config.TXFrames is 0)")
	}
	s.Complete()
	n = min(n, len(s.txFree), int(s.tx.free(uint32(n))))
	if n == 0 {
		// Everything in flight: frames a wakeup left on the ring (the
		// kernel was busy, the link down) go out only with another.
		if atomic.LoadUint32(s.tx.consumer) != s.tx.cachedProd {
			return 0, s.kick()
		}
		return 0, nil
	}
	size := uint64(s.cfg.FrameSize)
	for i := range n {
		addr := s.txFree[len(s.txFree)-1-i]
		l := fill(i, s.umem[addr:addr+size:addr+size])
		*s.tx.desc(s.tx.cachedProd + uint32(i)) = Desc{Addr: addr, Len: uint32(l)}
	}
	s.txFree = s.txFree[:len(s.txFree)-n]
	s.tx.submit(uint32(n))
	return n, s.kick()
}

// kick wakes the kernel to send what the TX ring holds, if it asks. In
// copy mode a wakeup sends a bounded batch (32 frames) and says EAGAIN
// while more wait: it goes on until the ring is empty or no wakeup moves
// it on.
func (s *Socket) kick() error {
	for range 2 + s.cfg.TXFrames/16 {
		if !s.cfg.NoNeedWakeup && !s.tx.needsWakeup() {
			return nil
		}
		before := atomic.LoadUint32(s.tx.consumer)
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		case unix.ENETDOWN:
			return nil // queued: sent when the link is up
		default:
			return fmt.Errorf("xsk: kick TX: %w", errno)
		}
		after := atomic.LoadUint32(s.tx.consumer)
		if after == s.tx.cachedProd || after == before && errno != 0 {
			return nil // all taken, or the kernel takes no more now (sent at the next wakeup)
		}
	}
	return nil
}

// Complete takes sent frames back off the completion ring; it returns how many.
func (s *Socket) Complete() int {
	if s.tx == nil {
		return 0
	}
	n := s.comp.avail(s.comp.size)
	for i := range n {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.cachedCons + i))
	}
	s.comp.release(n)
	return int(n)
}

// InFlight is how many send frames the kernel has not completed.
func (s *Socket) InFlight() int { return s.cfg.TXFrames - len(s.txFree) }

// Stats are the kernel's counters of the socket (XDP_STATISTICS).
type Stats struct {
	RxDropped        uint64 // frames dropped for want of a fill frame or RX ring space
	RxInvalid        uint64 // invalid fill addresses or frames too long
	TxInvalid        uint64
	RxRingFull       uint64
	FillRingEmpty    uint64 // times the kernel found no fill frame
	TxRingEmptyDescs uint64
}

// Stats reads the kernel's counters.
func (s *Socket) Stats() (Stats, error) {
	var st unix.XDPStatistics
	if err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st)); err != nil {
		return Stats{}, fmt.Errorf("xsk: statistics: %w", err)
	}
	return Stats{st.Rx_dropped, st.Rx_invalid_descs, st.Tx_invalid_descs, st.Rx_ring_full,
		st.Rx_fill_ring_empty_descs, st.Tx_ring_empty_descs}, nil
}

// SyscallConn is the socket in Go's poller: Read(f) calls f until it
// returns true, waiting for the socket to become readable (a frame on the
// RX ring) in between, without a thread of its own.
func (s *Socket) SyscallConn() (syscall.RawConn, error) { return s.file.SyscallConn() }

// SetReadDeadline bounds a Read waiting on SyscallConn (zero: none).
func (s *Socket) SetReadDeadline(t time.Time) error { return s.file.SetReadDeadline(t) }

// Interrupt makes a Read waiting on SyscallConn return (with
// os.ErrDeadlineExceeded), so its goroutine can stop before Close.
func (s *Socket) Interrupt() error { return s.file.SetReadDeadline(time.Unix(1, 0)) }

// Close closes the socket and unmaps its memory. Nothing may use the
// socket, or a frame of it, from then on: stop readers with Interrupt first.
func (s *Socket) Close() error {
	var errs []error
	if s.file != nil {
		errs = append(errs, s.file.Close())
	} else if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
	}
	s.fd = -1
	for _, r := range []*ring{s.fill, s.comp, s.rx, s.tx} {
		errs = append(errs, r.unmap())
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	return errors.Join(errs...)
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	n := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
