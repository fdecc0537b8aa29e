package turnserver

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// readGate stops the server's UDP readers (listeners and relay sockets)
// between two datagrams, for a hand-over: once held, no datagram is being
// handled, so pion's state is still, and what arrives waits in the socket
// buffers for whoever reads next (the successor, or this process again).
// pion reads each socket from one goroutine and handles a datagram before
// reading the next, so a reader is busy from a read's return to its next
// read.
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

// gatedReader is one socket's place at the gate.
type gatedReader struct {
	gate     *readGate
	handling bool // the last read returned a datagram
}

// read reads c through the gate (directly without one).
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
		for g.held {
			g.cond.Wait()
		}
		g.busy++
		g.mu.Unlock()
		n, addr, err := c.ReadFrom(p)
		g.mu.Lock()
		if err == nil {
			r.handling = true
			return n, addr, nil
		}
		g.done()
		if !g.held || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, addr, err
		}
		// Interrupted by hold: wait at the gate.
	}
}

func (g *readGate) done() {
	g.busy--
	g.cond.Broadcast()
}

// hold stops the readers of conns (every socket read through the gate) and
// waits until none is busy, at most timeout.
func (g *readGate) hold(conns []net.PacketConn, timeout time.Duration) error {
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now()) // wakes a blocked read
	}
	timer := time.AfterFunc(timeout, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.busy > 0 {
		if time.Now().After(deadline) {
			return errors.New("hand-over: readers still busy")
		}
		g.cond.Wait()
	}
	return nil
}

// release lets the readers of conns go on.
func (g *readGate) release(conns []net.PacketConn) {
	// Deadlines first: a reader let through must not find one expired.
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Time{})
	}
	g.mu.Lock()
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
}
