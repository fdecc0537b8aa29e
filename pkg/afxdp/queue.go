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

// queue is the AF_XDP socket of one RX queue and the goroutine that hands
// its frames to the conns by destination port. The frames stay in the UMEM
// until the conn's reader copies them out and gives them back (recycle).
type queue struct {
	ns     *namespace
	sock   *xsk.Socket
	raw    syscall.RawConn
	slot   uint32
	credit *int64

	fillMu sync.Mutex // the fill ring has one producer at a time

	stopping atomic.Bool
	done     sync.WaitGroup

	orphans atomic.Uint64 // frames for a port no conn holds any more
	invalid atomic.Uint64 // frames that do not carry the classifier's metadata
}

func openQueue(ns *namespace, ifindex, q int, slot uint32, cfg *ListenConfig) (_ *queue, err error) {
	sock, err := xsk.Open(ifindex, q, xsk.Config{Frames: cfg.frames(), FrameSize: frameSize, Mode: cfg.Mode})
	if err != nil {
		return nil, err
	}
	qu := &queue{ns: ns, sock: sock, slot: slot, credit: ns.credit(slot)}
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
	atomic.StoreInt64(qu.credit, int64(sock.Frames()))
	qu.done.Add(1)
	go qu.run()
	return qu, nil
}

// run hands received frames to their conns until close.
func (q *queue) run() {
	defer q.done.Done()
	descs := make([]xsk.Desc, 64)
	for {
		var n int
		err := q.raw.Read(func(uintptr) bool {
			n = q.sock.Receive(descs)
			return n > 0 || q.stopping.Load()
		})
		if q.stopping.Load() {
			// Frames taken but not handed on go back; the socket closes next.
			for _, d := range descs[:n] {
				q.recycle(d.Addr)
			}
			return
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		for _, d := range descs[:n] {
			q.dispatch(d)
		}
	}
}

func (q *queue) dispatch(d xsk.Desc) {
	frame, err := q.sock.Frame(d)
	if err != nil || len(frame) < metaSize+8 || frame[27] != metaVersion {
		q.invalid.Add(1)
		q.recycle(d.Addr)
		return
	}
	port := binary.BigEndian.Uint16(frame[metaSize+2:])
	if c := q.ns.conn(port, frame[26]); c == nil || !c.deliverFrame(q, d) {
		q.orphans.Add(1)
		q.recycle(d.Addr)
	}
}

// recycle gives a frame back to the kernel, then its credit to the classifier.
func (q *queue) recycle(addr uint64) {
	q.fillMu.Lock()
	n := q.sock.Fill(addr)
	q.fillMu.Unlock()
	if n == 1 {
		atomic.AddInt64(q.credit, 1)
	}
}

// close stops the classifier using the socket (no credit, out of the map),
// then the goroutine, then closes the socket. The caller has detached the
// program or taken the port out, and conns no longer hold its frames.
func (q *queue) close() error {
	atomic.StoreInt64(q.credit, 0)
	err := q.ns.objs.Xsks.Delete(q.slot)
	q.stopping.Store(true)
	err = errors.Join(err, q.sock.Interrupt())
	q.done.Wait()
	return errors.Join(err, q.sock.Close())
}

func (q *queue) stats() (xsk.Stats, error) { return q.sock.Stats() }
