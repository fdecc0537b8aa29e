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
// This Go implementation is the reference for the data plane's
// (bpf/rewrite.h), and its State is the data plane's map value: the agent
// reads it to translate NACKs.
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
// packet older than that is dropped (its number is unknown). Frames is
// how many recent frames' decisions it remembers.
const (
	History = 512
	Frames  = 32
)

// Flags of the packet at the top (State.LastFlags).
const (
	lastStart   = 1 << 0
	lastEnd     = 1 << 1
	lastPadding = 1 << 2
)

// State is one (sender, receiver) stream's renumbering, laid out as the
// data plane keeps it (struct rewrite_state in bpf/rewrite.h). The zero
// value has seen nothing.
//
// A number is `seq - (packets before seq that took none)`, so the state
// holds only which recent sequence numbers took none (Dropped, a bit per
// seq mod History) and how many did up to the top (Offset).
type State struct {
	Top       uint32 // extended highest sequence number processed
	Offset    uint32 // sequence numbers up to Top that took no number
	LastFrame uint16 // the packet at Top
	LastFlags uint8
	Started   uint8
	Dropped   [History / 64]uint64
	Frames    [Frames]uint32 // per frame mod Frames: frame<<16 | forward<<1 | 1
}

// Rewriter renumbers one (sender, receiver) stream.
type Rewriter = State

// Original is the sender's sequence number behind a number this receiver
// saw or sees missing (a NACK names it), if it is recent: the agent asks
// the sender for that packet (below the first packet rewritten, numbers
// are the sender's). False for a number never given or long gone.
func (r *State) Original(number uint16) (uint16, bool) {
	if r.Started == 0 {
		return 0, false
	}
	above := uint32(0) // numbers not given in (seq, Top]
	for seq := r.Top; r.Top-seq < History; seq-- {
		if r.dropped(seq) {
			above++
			continue
		}
		n := uint16(seq - r.Offset + above)
		if n == number {
			return uint16(seq), true
		}
		if int16(n-number) < 0 {
			return 0, false // numbers only fall from here down
		}
	}
	return 0, false
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
func (r *State) Rewrite(p Packet) (uint16, Verdict) {
	forward := p.Forward && !p.Padding
	if !p.Padding && !r.Late(p.Seq) { // a late packet's frame is older than the log may hold
		r.Frames[p.Frame%Frames] = uint32(p.Frame)<<16 | b2u(forward)<<1 | 1
	}
	if r.Started == 0 {
		// Below the first packet the numbers are the sender's (what the
		// receiver got before its stream was adapted went as it came), so
		// a late packet from there keeps its own: extended seqs leave room.
		top := uint32(p.Seq) + 1<<16
		*r = State{Top: top, Started: 1, Frames: r.Frames}
		r.setLast(p)
		return r.settle(top, forward)
	}
	seq := r.extend(p.Seq)
	if seq <= r.Top {
		return r.late(seq, forward)
	}
	// Packets Top+1 .. seq-1 have not arrived: dropped if they cannot be
	// anything this receiver gets, else their numbers kept free.
	missing := seq - r.Top - 1
	absorbed := missing > 0 && r.onlyDroppedBetween(p)
	if absorbed {
		r.Offset += missing
	}
	r.mark(r.Top+1, seq, absorbed)
	r.Top = seq
	r.setLast(p)
	return r.settle(seq, forward)
}

func (r *State) setLast(p Packet) {
	r.LastFrame = p.Frame
	r.LastFlags = uint8(b2u(p.Start)*lastStart | b2u(p.End)*lastEnd | b2u(p.Padding)*lastPadding)
}

// settle forwards or drops the packet at the top.
func (r *State) settle(seq uint32, forward bool) (uint16, Verdict) {
	r.mark(seq, seq+1, !forward)
	if !forward {
		r.Offset++
		return 0, Drop
	}
	return uint16(seq - r.Offset), Send
}

// late handles a packet below the top: a reordered one, or a
// retransmission. It takes the number kept (or first given) for it.
func (r *State) late(seq uint32, forward bool) (uint16, Verdict) {
	if r.Top-seq >= History || r.dropped(seq) {
		return 0, Drop // older than what is remembered, or it took no number
	}
	n := uint16(seq - r.Offset + r.droppedAbove(seq))
	if forward {
		return n, Send
	}
	return n, SendAsPadding
}

// mark sets the Dropped bits of [from, to): whether they took no number.
func (r *State) mark(from, to uint32, dropped bool) {
	if to-from > History {
		from = to - History
	}
	for seq := from; seq != to; seq++ {
		w, b := seq%History/64, seq%64
		if dropped {
			r.Dropped[w] |= 1 << b
		} else {
			r.Dropped[w] &^= 1 << b
		}
	}
}

func (r *State) dropped(seq uint32) bool {
	return r.Dropped[seq%History/64]&(1<<(seq%64)) != 0
}

// droppedAbove counts the sequence numbers in (seq, Top] that took none.
func (r *State) droppedAbove(seq uint32) uint32 {
	n := 0
	for s := seq + 1; s != r.Top+1; s++ {
		if r.dropped(s) {
			n++
		}
	}
	return uint32(n)
}

// Late says whether seq is at or below the top: a reordered packet or a
// retransmission.
func (r *State) Late(seq uint16) bool {
	return r.Started != 0 && int16(seq-uint16(r.Top)) <= 0
}

// Frame is a recent frame's decision, if remembered.
func (r *State) Frame(f uint16) (forward, known bool) { return r.frame(f) }

// frame is a recent frame's decision, if remembered.
func (r *State) frame(f uint16) (forward, known bool) {
	e := r.Frames[f%Frames]
	if e&1 == 0 || uint16(e>>16) != f {
		return false, false
	}
	return e&2 != 0, true
}

// onlyDroppedBetween: whether every packet between the top and b (b
// later, and not consecutive) is one this receiver does not get. Missing
// packets belong to the top's frame (unless it ended there), to b's frame
// (unless b starts it), or are padding between frames; frames wholly
// missing are unknown.
func (r *State) onlyDroppedBetween(b Packet) bool {
	a := r.LastFrame
	switch {
	case r.LastFlags&lastPadding != 0 || b.Padding:
		return false // no frame to reason from
	case a == b.Frame:
		forward, known := r.frame(a)
		return known && !forward
	case b.Frame != a+1:
		return false // whole frames in between, their layers unknown
	}
	if r.LastFlags&lastEnd == 0 {
		if forward, known := r.frame(a); !known || forward {
			return false
		}
	}
	if !b.Start {
		if forward, known := r.frame(b.Frame); !known || forward {
			return false
		}
	}
	return true
}

// extend places a 16-bit sequence number next to the top (RFC 3550 serial
// arithmetic: within half the space of it).
func (r *State) extend(seq uint16) uint32 {
	delta := int16(seq - uint16(r.Top))
	return uint32(int64(r.Top) + int64(delta))
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// ForgetBelow makes every sequence number below the top none of the
// receiver's: after a simulcast switch the state starts over on another
// encoding, whose earlier packets (late ones, retransmissions) must not
// take numbers the previous encoding's packets had.
func (r *State) ForgetBelow() { r.mark(r.Top+1, r.Top+History, true) }
