package restart

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Gate stops the server's UDP readers (listeners and relay sockets)
// between two datagrams, and its TCP listeners between two connections,
// for a hand-over: once held, no datagram is being handled, so pion's
// state is still, and what arrives waits in the socket buffers for whoever
// reads next (the successor, or this process again). pion reads each
// socket from one goroutine and handles a datagram before reading the
// next, so a reader is busy from a read's return to its next read.
//
// Every datagram passes it: while open it costs two atomic operations and
// no lock; only a held gate parks readers on the mutex.
type Gate struct {
	held atomic.Bool
	busy atomic.Int64 // readers inside a read or handling a datagram

	mu   sync.Mutex // parking only
	cond *sync.Cond
}

func newGate() *Gate {
	g := &Gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// wakeFunc sets a socket's read (or accept) deadline: a past one wakes a
// blocked reader, the zero time clears it.
type wakeFunc func(time.Time) error

// Reader is one socket's place at the gate; the zero Reader has none.
type Reader struct {
	gate     *Gate
	handling bool // the last read returned a datagram
}

// Reader is a place at g for one socket (at a nil g: none).
func (g *Gate) Reader() Reader { return Reader{gate: g} }

// Read reads c through the gate (directly without one). Nobody else
// sets deadlines on gated sockets, so an expired one is the gate's doing.
func (r *Reader) Read(c net.PacketConn, p []byte) (int, net.Addr, error) {
	g := r.gate
	if g == nil {
		return c.ReadFrom(p)
	}
	if r.handling {
		r.handling = false
		g.busy.Add(-1)
	}
	for {
		g.enter()
		n, addr, err := c.ReadFrom(p)
		if err == nil {
			r.handling = true
			return n, addr, nil
		}
		g.busy.Add(-1)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, addr, err
		}
	}
}

// enter counts a reader busy once the gate is open. Busy first, held
// checked after (hold does the opposite), so hold either sees the reader
// or the reader sees the gate closed.
func (g *Gate) enter() {
	for {
		g.waitOpen()
		g.busy.Add(1)
		if !g.held.Load() {
			return
		}
		g.busy.Add(-1)
	}
}

// Accept accepts on l through the gate (directly at a nil g).
func (g *Gate) Accept(l net.Listener) (net.Conn, error) {
	for {
		if g != nil {
			g.waitOpen()
		}
		c, err := l.Accept()
		if g == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return c, err
		}
	}
}

func (g *Gate) waitOpen() {
	if !g.held.Load() {
		return
	}
	g.mu.Lock()
	for g.held.Load() {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// hold stops the readers and waits until none is busy, at most timeout.
// sockets are asked for after the gate closes, so one opened meanwhile is
// in the list or finds the gate closed.
func (g *Gate) hold(sockets func() []wakeFunc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	g.held.Store(true)
	for _, wake := range sockets() {
		_ = wake(time.Now())
	}
	// Rare (a hand-over): polling is simpler than signalling every reader.
	for g.busy.Load() > 0 {
		if time.Now().After(deadline) {
			return errors.New("hand-over: readers still busy")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// release lets the readers go on.
func (g *Gate) release(sockets []wakeFunc) {
	// Deadlines first: a reader let through must not find one expired.
	for _, wake := range sockets {
		_ = wake(time.Time{})
	}
	g.mu.Lock()
	g.held.Store(false)
	g.cond.Broadcast()
	g.mu.Unlock()
}
