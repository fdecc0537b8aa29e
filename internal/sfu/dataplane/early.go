package dataplane

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Early datagrams (the user plane). A browser sends its first media, and
// libwebrtc its first bandwidth probes, as soon as its side of the DTLS
// handshake is done, which can be before this side has derived the SRTP
// keys and installed the publisher's stream (the controller does both
// when its handshake ends, on a CPU the browsers share). Dropped, those
// packets' transport-wide numbers read as lost, and a failed first probe
// leaves an application-limited encoder at its start rate for good. So a
// few datagrams from an address with no keys or no stream yet are held,
// briefly, and handled, with the times the kernel received them, before
// its first datagram after its stream is installed.
const (
	earlyPerAddr = 128         // datagrams held per address
	earlyAddrs   = 16          // addresses held at once
	earlyFor     = time.Second // how long an address's are kept
)

// earlyDatagram is one held datagram: as it came (opened false) or opened
// (its plain RTP or RTCP, and what SRTP added to it).
type earlyDatagram struct {
	c        *mediaConn
	p        []byte
	opened   bool
	overhead int
	rxAt     time.Duration
	why      Outcome // counted if it is dropped unhandled
}

type earlyQueue struct {
	since time.Duration // CLOCK_MONOTONIC of its first
	held  []earlyDatagram
}

// earlyArrivals holds early datagrams by remote address.
type earlyArrivals struct {
	mu sync.Mutex
	by map[netip.AddrPort]*earlyQueue
	n  atomic.Int32 // len(by), read without the lock per datagram
}

// pending says whether any address has datagrams held.
func (e *earlyArrivals) pending() bool { return e.n.Load() > 0 }

// hold keeps a copy of d from from; false if it was not kept (the
// address's queue or the table is full), and the datagrams of addresses
// held too long, dropped now.
func (e *earlyArrivals) hold(from netip.AddrPort, d earlyDatagram, now time.Duration) (kept bool, expired []earlyDatagram) {
	e.mu.Lock()
	defer e.mu.Unlock()
	expired = e.expireLocked(now)
	q := e.by[from]
	if q == nil {
		if len(e.by) >= earlyAddrs {
			return false, expired
		}
		if e.by == nil {
			e.by = map[netip.AddrPort]*earlyQueue{}
		}
		q = &earlyQueue{since: now}
		e.by[from] = q
		e.n.Store(int32(len(e.by)))
	}
	if len(q.held) >= earlyPerAddr {
		return false, expired
	}
	d.p = append([]byte(nil), d.p...)
	q.held = append(q.held, d)
	return true, expired
}

// take removes and returns what is held from from, oldest first.
func (e *earlyArrivals) take(from netip.AddrPort) []earlyDatagram {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.by[from]
	if q == nil {
		return nil
	}
	delete(e.by, from)
	e.n.Store(int32(len(e.by)))
	return q.held
}

// expire drops and returns what was held longer than earlyFor by now.
func (e *earlyArrivals) expire(now time.Duration) []earlyDatagram {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.expireLocked(now)
}

func (e *earlyArrivals) expireLocked(now time.Duration) (expired []earlyDatagram) {
	for addr, q := range e.by {
		if now-q.since > earlyFor {
			expired = append(expired, q.held...)
			delete(e.by, addr)
		}
	}
	e.n.Store(int32(len(e.by)))
	return expired
}
