// Package rewrite renumbers one sender's RTP stream for one receiver whose
// rate is adapted by dropping layers: the receiver must see no gap where a
// packet was dropped on purpose (each gap costs a NACK and a needless
// retransmission), and must see every gap where a packet it should have had
// was lost (a hidden loss breaks its decoder until the next key frame).
//
// Unlike Scallop's egress pipeline, which never sees the packets it
// suppressed, the SFU's data plane sees every packet that reaches it, so it
// counts exactly what it dropped. What it cannot know is what a packet that
// has not arrived would have been. The rule: a missing packet is taken for
// dropped only when it cannot be anything else — inside a frame this
// receiver does not get (a frame's packets are consecutive), or between one
// frame's last packet and the next frame's first (only padding lies there).
// Every other missing packet keeps its number free: if it arrives late it
// takes that number; if it never does, the receiver sees the loss. A late
// packet the receiver does not get goes out as padding under its kept
// number, so the gap closes instead of drawing NACKs (libwebrtc counts a
// padding packet as received); so does a retransmission the receiver's NACK
// for such a gap draws from the sender.
//
// This Go implementation is the reference for the data plane's.
package rewrite

// Packet is what the rewriter needs of one packet of the sender's stream.
type Packet struct {
	Seq uint16
	// Frame is the packet's frame number (the dependency descriptor's),
	// Start and End whether it begins or ends its frame. Padding-only
	// packets have no frame.
	Frame      uint16
	Start, End bool
	Padding    bool
	// Forward: this receiver gets the packet's layer. Padding is never
	// forwarded to a rewritten stream.
	Forward bool
}

// History is how many recent sequence numbers the rewriter remembers: a
// packet older than that is dropped (its number is unknown).
const History = 512

// Rewriter renumbers one (sender, receiver) stream.
type Rewriter struct {
	started bool
	top     uint32 // extended highest sequence number processed
	offset  uint32 // dropped packets before top+1 that no number is kept for
	slots   [History]slot
	origin  [History]uint32 // by number mod History: the extended sequence number given it
	frames  frameLog
	last    Packet // the packet at top
}

// Original is the sender's sequence number behind a number this receiver
// saw or sees missing (a NACK names it), if it is recent: the agent asks
// the sender for that packet. False for a number never given.
func (r *Rewriter) Original(number uint16) (uint16, bool) {
	seq := r.origin[number%History]
	sl := r.slots[seq%History]
	if !r.started || sl.seq != seq || sl.number != number || (sl.state != sent && sl.state != kept) {
		return 0, false
	}
	return uint16(seq), true
}

// number gives seq the receiver's number n (kept free or sent).
func (r *Rewriter) number(seq uint32, st state, n uint16) {
	r.slots[seq%History] = slot{seq: seq, state: st, number: n}
	r.origin[n%History] = seq
}

// slot is one sequence number's fate.
type slot struct {
	seq    uint32 // extended, to tell a slot's current number from an old one
	state  state
	number uint16 // the receiver's number, for kept and sent
}

type state uint8

const (
	unused  state = iota
	kept          // missing, its number kept free
	dropped       // dropped (or taken for dropped): no number
	sent          // forwarded with number
)

// frameLog remembers recent frames' decisions: a missing packet inside a
// frame inherits its frame's.
type frameLog struct {
	frame   [64]uint16
	forward [64]bool
	known   [64]bool
}

func (f *frameLog) set(frame uint16, forward bool) {
	i := frame % 64
	f.frame[i], f.forward[i], f.known[i] = frame, forward, true
}

func (f *frameLog) get(frame uint16) (forward, known bool) {
	i := frame % 64
	if !f.known[i] || f.frame[i] != frame {
		return false, false
	}
	return f.forward[i], true
}

// Verdict is what becomes of a packet for this receiver.
type Verdict uint8

const (
	Drop Verdict = iota
	Send
	// SendAsPadding: send it emptied to a padding-only packet (it fills a
	// gap left for it, and the receiver does not get its layer).
	SendAsPadding
)

// Rewrite decides packet p's fate for this receiver, and the sequence
// number it goes out with.
func (r *Rewriter) Rewrite(p Packet) (uint16, Verdict) {
	forward := p.Forward && !p.Padding
	if !p.Padding {
		r.frames.set(p.Frame, forward)
	}
	if !r.started {
		// Room below the first number for packets reordered before it.
		r.started, r.top, r.last = true, uint32(p.Seq)+1<<16, p
		return r.settle(r.top, forward)
	}
	seq := r.extend(p.Seq)
	if seq <= r.top {
		return r.late(seq, forward)
	}
	// Packets top+1 .. seq-1 have not arrived: dropped if they cannot be
	// anything this receiver gets, else their numbers kept free.
	// Only the last History of them can still arrive in time to matter.
	if missing := seq - r.top - 1; missing > 0 && r.onlyDroppedBetween(r.last, p) {
		r.offset += missing
	} else {
		for s := max(r.top+1, seq-History); s < seq; s++ {
			r.number(s, kept, uint16(s-r.offset))
		}
	}
	r.top, r.last = seq, p
	return r.settle(seq, forward)
}

// settle forwards or drops the packet at the top.
func (r *Rewriter) settle(seq uint32, forward bool) (uint16, Verdict) {
	if !forward {
		r.offset++
		r.slots[seq%History] = slot{seq: seq, state: dropped}
		return 0, Drop
	}
	n := uint16(seq - r.offset)
	r.number(seq, sent, n)
	return n, Send
}

// late handles a packet at or below the top: a reordered one, or a
// retransmission.
func (r *Rewriter) late(seq uint32, forward bool) (uint16, Verdict) {
	if r.top-seq >= History {
		return 0, Drop // older than what is remembered
	}
	sl := &r.slots[seq%History]
	if sl.seq != seq {
		return 0, Drop
	}
	if sl.state != sent && sl.state != kept {
		return 0, Drop
	}
	sl.state = sent // a kept number taken, or a retransmission: the same number as first
	if forward {
		return sl.number, Send
	}
	return sl.number, SendAsPadding
}

// onlyDroppedBetween: whether every packet between a and b (b later, and
// not consecutive) is one this receiver does not get. Missing packets
// belong to a's frame (unless a ended it), to b's frame (unless b starts
// it), or are padding between frames; frames wholly missing are unknown.
func (r *Rewriter) onlyDroppedBetween(a, b Packet) bool {
	switch {
	case a.Padding || b.Padding:
		return false // no frame to reason from
	case a.Frame == b.Frame:
		forward, known := r.frames.get(a.Frame)
		return known && !forward
	case b.Frame != a.Frame+1:
		return false // whole frames in between, their layers unknown
	}
	if !a.End {
		if forward, known := r.frames.get(a.Frame); !known || forward {
			return false
		}
	}
	if !b.Start {
		if forward, known := r.frames.get(b.Frame); !known || forward {
			return false
		}
	}
	return true
}

// extend places a 16-bit sequence number next to the top (RFC 3550 serial
// arithmetic: within half the space of it).
func (r *Rewriter) extend(seq uint16) uint32 {
	delta := int16(seq - uint16(r.top))
	return uint32(int64(r.top) + int64(delta))
}
