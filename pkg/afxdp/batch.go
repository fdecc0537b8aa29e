package afxdp

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/xsk"
)

// Message is one datagram of a batch read: the caller's buffer, and what
// ReadBatch put in it.
type Message struct {
	Buf     []byte         // the caller's; a longer datagram is cut to it
	N       int            // bytes of the datagram in Buf
	Addr    netip.AddrPort // its sender
	Arrival uint64         // CLOCK_MONOTONIC ns at the classifier; 0 for the kernel socket's
}

// ReadBatch reads up to len(ms) datagrams, as ipv4.PacketConn.ReadBatch
// (recvmmsg) does: it waits for the first, then takes whatever else is
// ready without waiting, from the RX ring straight into ms where the conn
// polls its queue itself (one frame copy each, the frames given back to
// the fill ring together), and what the kernel socket received. It
// returns how many of ms it filled (at least one unless err is set).
// Datagrams keep their order per path, as ReadFrom's.
func (c *Conn) ReadBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	n := 0
	for n == 0 {
		f, d, err := c.next()
		if err != nil {
			return 0, err
		}
		if d != nil {
			c.fromKernel(&ms[0], d)
			n = 1
		} else if c.readInto(&ms[0], f) {
			n = 1
		}
	}
	return n + c.readReady(ms[n:]), nil
}

// readReady fills ms with what is ready, without waiting: the frames
// queued for c first, then its queue's RX ring (if no other reader polls
// it), and the kernel socket's datagrams.
func (c *Conn) readReady(ms []Message) int {
	n := 0
	for n < len(ms) {
		select {
		case <-c.closing:
			return n
		case f := <-c.frames:
			if c.readInto(&ms[n], f) {
				n++
			}
			continue
		case d := <-c.kernel:
			c.fromKernel(&ms[n], &d)
			n++
			continue
		default:
		}
		q := c.direct
		if q == nil || !q.pollMu.TryLock() {
			return n
		}
		if q.stopping.Load() { // closed under us: its rings are gone
			q.release()
			return n
		}
		got, taken := c.receiveInto(q, ms[n:])
		q.release()
		n += got
		// Done when the ring is empty, or held nothing for c (the others'
		// frames are their readers' to wait for, not this batch's).
		if taken == 0 || (got == 0 && len(c.frames) == 0) {
			return n
		}
	}
	return n
}

// receiveInto takes what q's RX ring holds (at most as many frames as ms
// has room for): c's frames straight into ms, unless some wait in
// c.frames already (they come first: these queue behind them), the
// others' handed on. It returns how many of ms it filled and how many
// frames it took off the ring.
func (c *Conn) receiveInto(q *queue, ms []Message) (filled, taken int) {
	descs := c.descs[:min(len(c.descs), len(ms))]
	taken = q.sock.Receive(descs)
	queued := len(c.frames) > 0
	done := c.done[:0]
	for _, d := range descs[:taken] {
		to := q.route(d)
		if to != c || queued {
			if to == c {
				queued = true
			}
			q.handOn(to, d) // (takes the conn's c.mu: not held here)
			continue
		}
		if c.readIntoKept(&ms[filled], q, d) {
			filled++
		}
		done = append(done, d.Addr)
	}
	q.recycle(done...)
	c.done = done
	return filled, taken
}

// readInto reads a queued frame into m and gives the frame back; false if
// it was not a sound datagram (counted) or the conn is closing.
func (c *Conn) readInto(m *Message, f frameRef) bool {
	defer f.q.recycle(f.desc.Addr)
	return c.readIntoKept(m, f.q, f.desc)
}

// readIntoKept reads frame d into m unless the conn is closing (its
// queue may be closing: the frame is not read); the caller gives the
// frame back.
func (c *Conn) readIntoKept(m *Message, q *queue, d xsk.Desc) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return !c.closed && c.parseInto(m, q, d)
}

// parseInto copies frame d's payload into m if it is a sound datagram,
// counting it either way; the caller gives the frame back.
func (c *Conn) parseInto(m *Message, q *queue, d xsk.Desc) bool {
	frame, err := q.sock.Frame(d)
	if err != nil {
		c.malformed.Add(1)
		return false
	}
	from, payload, err := parseFrame(frame, c.v6Socket)
	switch {
	case errors.Is(err, errChecksum):
		c.badChecksum.Add(1)
		return false
	case err != nil:
		c.malformed.Add(1)
		return false
	}
	c.viaXDP.Add(1)
	m.N, m.Addr, m.Arrival = copy(m.Buf, payload), from, binary.NativeEndian.Uint64(frame[metaArrival:])
	return true
}

func (c *Conn) fromKernel(m *Message, d *kernelDatagram) {
	c.viaKernel.Add(1)
	m.N, m.Addr, m.Arrival = copy(m.Buf, d.buf), d.from, 0
}
