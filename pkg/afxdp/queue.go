package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ebrtc/ebrtc/internal/xsk"
)

// queue is the AF_XDP socket of one RX queue. Its frames go to the conns
// by destination port, handed on by whoever consumes the RX ring: on an
// interface with one RX queue, the reader of a conn on it (polled: the
// reader that holds pollMu waits on the socket itself, so a datagram for
// it costs no goroutine switch); on an interface with several, a goroutine
// per queue (a reader can wait on one socket only). The frames stay in the
// UMEM until the conn's reader copies them out and gives them back (recycle).
type queue struct {
	ns     *namespace
	sock   *xsk.Socket
	raw    syscall.RawConn
	slot   uint32
	credit *int64

	fillMu sync.Mutex // the fill ring has one producer at a time
	txMu   sync.Mutex // so has the TX ring (WriteBatch)
	// noTX: why the socket has no TX ring where it should (the UMEM with
	// send frames was over the locked-memory limit); "" if it has one.
	noTX string

	running bool          // a goroutine consumes it (else readers poll it); under ns.mu
	pollMu  sync.Mutex    // held by whoever consumes the RX ring: a reader, or the goroutine for good
	free    chan struct{} // a polling reader left: another waiting reader may poll

	stopping atomic.Bool
	done     sync.WaitGroup

	orphans atomic.Uint64 // frames for a port no conn holds any more
	invalid atomic.Uint64 // frames that do not carry the classifier's metadata
}

func openQueue(ns *namespace, ifindex, q int, slot uint32, polled bool, cfg *ListenConfig) (_ *queue, err error) {
	// A slot's credit from a socket before: none until this one is filled.
	atomic.StoreInt64(ns.credit(slot), 0)
	xc := xsk.Config{Frames: cfg.frames(), FrameSize: frameSize, TXFrames: txFramesOf(q), Mode: cfg.Mode}
	sock, err := xsk.Open(ifindex, q, xc)
	var noTX string
	if errors.Is(err, syscall.ENOBUFS) && xc.TXFrames > 0 {
		// Over the locked-memory limit with the send frames (the common
		// 8 MiB holds the receive frames alone): receive, and let
		// WriteBatch send through the kernel socket, saying why.
		noTX = err.Error()
		xc.TXFrames = 0
		sock, err = xsk.Open(ifindex, q, xc)
	}
	if err != nil {
		return nil, err
	}
	qu := &queue{ns: ns, sock: sock, slot: slot, credit: ns.credit(slot), free: make(chan struct{}, 1), noTX: noTX}
	defer func() {
		if err != nil {
			sock.Close()
		}
	}()
	if qu.raw, err = sock.SyscallConn(); err != nil {
		return nil, err
	}
	for i := range sock.Frames() {
		if sock.Fill(sock.RXFrame(i)) != 1 {
			return nil, fmt.Errorf("fill ring took fewer than %d frames", sock.Frames())
		}
	}
	if err := ns.objs.Xsks.Put(slot, uint32(sock.FD())); err != nil {
		return nil, fmt.Errorf("XSK map: %w", err)
	}
	// Credits only once the socket is in the map and every frame is in the
	// fill ring: from here the classifier may redirect.
	atomic.AddInt64(qu.credit, int64(sock.Frames()))
	if !polled {
		qu.startRunner()
	}
	return qu, nil
}

// txFramesOf is queue q's send frames: WriteBatch sends through each
// interface's first queue.
func txFramesOf(q int) int {
	if q == 0 {
		return txFrames
	}
	return 0
}

// startRunner starts the goroutine, once (under ns.mu, or before the
// queue is shared).
func (q *queue) startRunner() {
	if q.running {
		return
	}
	q.running = true
	q.done.Add(1)
	go q.run()
}

// run hands received frames to their conns until close, holding the
// queue's poll token throughout: readers then wait for what it hands them.
func (q *queue) run() {
	defer q.done.Done()
	q.pollMu.Lock()
	defer q.pollMu.Unlock()
	descs := make([]xsk.Desc, 64)
	for {
		var n int
		err := q.raw.Read(func(uintptr) bool {
			n = q.sock.Receive(descs)
			return n > 0 || q.stopping.Load()
		})
		if q.stopping.Load() {
			return // the socket closes next, frames and all
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		for _, d := range descs[:n] {
			q.dispatch(d)
		}
	}
}

func (q *queue) dispatch(d xsk.Desc) { q.handOn(q.route(d), d) }

// handOn queues a routed frame for its conn, or gives it back.
func (q *queue) handOn(to *Conn, d xsk.Desc) {
	if to != nil && !to.deliverFrame(q, d) {
		q.orphans.Add(1)
		q.recycle(d.Addr)
	}
}

// route is the conn a received frame is for; nil (and the frame given
// back) if none holds its port or it carries no metadata.
func (q *queue) route(d xsk.Desc) *Conn {
	frame, err := q.sock.Frame(d)
	if err != nil || !metaOK(frame) {
		q.invalid.Add(1)
		q.recycle(d.Addr)
		return nil
	}
	c := q.ns.conn(binary.BigEndian.Uint16(frame[metaSize+2:]), frame[metaFamily])
	if c == nil {
		q.orphans.Add(1)
		q.recycle(d.Addr)
	}
	return c
}

// release ends a reader's turn at polling and lets a waiting one take it.
func (q *queue) release() {
	q.pollMu.Unlock()
	select {
	case q.free <- struct{}{}:
	default:
	}
}

// recycle gives frames back to the kernel, then their credits to the
// classifier; nothing once the queue is closing (its rings go away).
func (q *queue) recycle(addrs ...uint64) {
	if len(addrs) == 0 {
		return
	}
	q.fillMu.Lock()
	defer q.fillMu.Unlock()
	if q.stopping.Load() {
		return
	}
	if n := q.sock.Fill(addrs...); n > 0 {
		atomic.AddInt64(q.credit, int64(n))
	}
}

// close stops the classifier using the socket (no credit, out of the map),
// then the goroutine, then closes the socket. The caller has detached the
// program or taken the port out, and conns no longer hold its frames.
func (q *queue) close() error {
	q.stopping.Store(true)
	atomic.StoreInt64(q.credit, 0)
	err := q.ns.objs.Xsks.Delete(q.slot)
	err = errors.Join(err, q.sock.Interrupt())
	q.done.Wait()
	q.pollMu.Lock() // a reader still polling sees stopping and leaves
	defer q.pollMu.Unlock()
	q.fillMu.Lock() // a recycle under way ends first; later ones see stopping
	defer q.fillMu.Unlock()
	atomic.StoreInt64(q.credit, 0)
	return errors.Join(err, q.sock.Close())
}

func (q *queue) stats() (xsk.Stats, error) { return q.sock.Stats() }
