package turnserver

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// readGate stops the server's UDP readers (listeners and relay sockets)
// between two datagrams, and its TCP listeners between two connections,
// for a hand-over: once held, no datagram is being handled, so pion's
// state is still, and what arrives waits in the socket buffers for whoever
// reads next (the successor, or this process again). pion reads each
// socket from one goroutine and handles a datagram before reading the
// next, so a reader is busy from a read's return to its next read.
type readGate struct {
	mu   sync.Mutex
	cond *sync.Cond
	held bool
	busy int // readers inside a read or handling a datagram
}

func newReadGate() *readGate {
	g := &readGate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// wakeFunc sets a socket's read (or accept) deadline: a past one wakes a
// blocked reader, the zero time clears it.
type wakeFunc func(time.Time) error

// gatedReader is one socket's place at the gate.
type gatedReader struct {
	gate     *readGate
	handling bool // the last read returned a datagram
}

// read reads c through the gate (directly without one). Nobody else sets
// deadlines on gated sockets, so an expired one is the gate's doing.
func (r *gatedReader) read(c net.PacketConn, p []byte) (int, net.Addr, error) {
	g := r.gate
	if g == nil {
		return c.ReadFrom(p)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.handling {
		r.handling = false
		g.done()
	}
	for {
		g.waitOpen()
		g.busy++
		g.mu.Unlock()
		n, addr, err := c.ReadFrom(p)
		g.mu.Lock()
		if err == nil {
			r.handling = true
			return n, addr, nil
		}
		g.done()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, addr, err
		}
	}
}

// accept accepts on l through the gate (directly without one).
func (g *readGate) accept(l net.Listener) (net.Conn, error) {
	for {
		if g != nil {
			g.mu.Lock()
			g.waitOpen()
			g.mu.Unlock()
		}
		c, err := l.Accept()
		if g == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return c, err
		}
	}
}

func (g *readGate) waitOpen() {
	for g.held {
		g.cond.Wait()
	}
}

func (g *readGate) done() {
	g.busy--
	g.cond.Broadcast()
}

// hold stops the readers and waits until none is busy, at most timeout.
// sockets are asked for after the gate closes, so one opened meanwhile is
// in the list or finds the gate closed.
func (g *readGate) hold(sockets func() []wakeFunc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
	for _, wake := range sockets() {
		_ = wake(time.Now())
	}
	timer := time.AfterFunc(timeout, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer timer.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.busy > 0 {
		if !time.Now().Before(deadline) {
			return errors.New("hand-over: readers still busy")
		}
		g.cond.Wait()
	}
	return nil
}

// release lets the readers go on.
func (g *readGate) release(sockets []wakeFunc) {
	// Deadlines first: a reader let through must not find one expired.
	for _, wake := range sockets {
		_ = wake(time.Time{})
	}
	g.mu.Lock()
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
}
