package layers

import "github.com/ebrtc/ebrtc/internal/sfu/rewrite"

// Simulcast (RFC 8853): a sender sends the same video as several
// encodings, each an RTP stream of its own (its SSRC, sequence numbers,
// timestamps and dependency descriptor frame numbers), and each receiver
// takes one of them, changed only at a key frame of the one it moves to.
// The receiver sees one continuous stream: the SFU's SSRC for it, and
// numbers that go on across the switch where the previous encoding's
// stopped (Simulcast.Shift).

// MaxEncodings is how many encodings of one sender the data planes tell
// apart; NoEncoding is a receiver's before it took any.
const (
	MaxEncodings = 4
	NoEncoding   = 0xff
)

// EncodingTarget is a simulcast receiver's target as the data planes hold
// it: the encoding in the high four bits, a decode target of it in the
// low four (AllTargets: all of its layers).
func EncodingTarget(encoding, target uint8) uint8 {
	if target >= MaxTargets {
		target = 0xf
	}
	return encoding<<4 | target
}

// splitTarget undoes EncodingTarget, for a target that is neither
// AllTargets nor NoVideo.
func splitTarget(v uint8) (encoding, target uint8) {
	encoding, target = v>>4, v&0xf
	if target == 0xf {
		target = AllTargets
	}
	return encoding, target
}

// Numbers are the fields a receiver of a simulcast sender gets rewritten.
type Numbers struct {
	Seq   uint16
	TS    uint32
	Frame uint16 // the dependency descriptor's frame number
	VP8   VP8    // a VP8 payload descriptor's (none in a Padding verdict's)
}

// Simulcast is one receiver's state across a sender's encodings.
type Simulcast struct {
	Encoding uint8   // in force; NoEncoding before the first
	Shift    Numbers // added to the encoding's own numbers
	Last     Numbers // of the latest packet sent, as sent
	LastAt   uint64  // when it went (ns, the data plane's clock)
	Sent     bool    // Last holds
	// SwitchWait: since when (ns) a move to another encoding waits for
	// its key frame; 0: none.
	SwitchWait uint64
}

// DecideEncoding is the data plane's decision for a simulcast receiver
// whose target is target (EncodingTarget, AllTargets or NoVideo) on f, a
// packet of encoding enc with RTP timestamp ts; top is the highest
// encoding the sender is known to send. The numbers are what the packet
// goes out with.
func (r *Replica) DecideEncoding(f *Frame, enc uint8, ts uint32, target, top uint8, now uint64) (Numbers, Verdict) {
	want, layer := top, uint8(AllTargets)
	switch target {
	case NoVideo:
		want, layer = r.Sim.Encoding, NoVideo
	case AllTargets:
	default:
		want, layer = splitTarget(target)
		want = min(want, top)
	}
	switched := false
	if enc != r.Sim.Encoding {
		if enc != want || !f.Key || !f.Packet.Start {
			if enc == want && layer != NoVideo && r.Sim.SwitchWait == 0 {
				r.Sim.SwitchWait = now // (also where the one in force went silent: nothing else notes it)
			}
			return Numbers{}, Other
		}
		r.switchEncoding(enc, f, ts, now)
		switched = true
	}
	waits := want != enc && layer != NoVideo
	if waits && want < enc {
		layer = 0 // while the lower one's key frame is awaited, the least of this one
	}
	if !f.Known {
		r.switchUndescribed(f, layer)
	}
	n, v := r.Decide(f, layer, now)
	if switched {
		r.RW.ForgetBelow()
	}
	switch {
	case !waits:
		r.Sim.SwitchWait = 0
	case r.Sim.SwitchWait == 0:
		r.Sim.SwitchWait = now // the agent asks for key frames when this lasts (KeyFrameDue)
	}
	if v != Send && v != Padding {
		return Numbers{}, Drop
	}
	out := Numbers{Seq: n + r.Sim.Shift.Seq, TS: ts + r.Sim.Shift.TS, Frame: f.Packet.Frame + r.Sim.Shift.Frame}
	if v == Send {
		out.VP8 = f.VP8.Shifted(r.Sim.Shift.VP8)
	}
	if !r.Sim.Sent || int16(out.Seq-r.Sim.Last.Seq) > 0 {
		last := out
		last.VP8 = r.Sim.Last.VP8.after(out.VP8)
		r.Sim.Last, r.Sim.LastAt, r.Sim.Sent = last, now, true
	}
	return out, v
}

// switchEncoding moves the receiver to encoding enc at f, the first
// packet of one of its key frames: its numbers continue where the last
// packet sent left off, its timestamps by the time since then.
func (r *Replica) switchEncoding(enc uint8, f *Frame, ts uint32, now uint64) {
	r.Sim.Encoding, r.Sim.SwitchWait = enc, 0
	r.Current, r.SwitchWait, r.RW = NoVideo, 0, rewrite.State{}
	if !r.Sim.Sent {
		return
	}
	r.Sim.Shift = Numbers{
		Seq:   r.Sim.Last.Seq + 1 - f.Packet.Seq,
		TS:    r.Sim.Last.TS + videoTicks(r.Sim.LastAt, now) - ts,
		Frame: r.Sim.Last.Frame + 1 - f.Packet.Frame,
		VP8:   continuing(r.Sim.Last.VP8, f.VP8),
	}
}

// switchUndescribed moves the layer in force at a frame no descriptor
// describes (an encoding that sends none: Firefox's VP8), which has no
// layers: all of it (0: the one target it has) or, paused, none, resumed
// at a key frame.
func (r *Replica) switchUndescribed(f *Frame, layer uint8) {
	switch {
	case layer == NoVideo:
		r.Current = NoVideo
	case r.Current == NoVideo && f.Key && f.Packet.Start:
		r.Current = 0
	}
}

// videoTicks is the time from then to now (ns) on the 90 kHz video clock,
// at least one tick. now may be before then: another thread (a CPU of the
// eBPF plane, its slow path) read its clock first and decided last.
func videoTicks(then, now uint64) uint32 {
	if now <= then {
		return 1
	}
	return uint32(max((now-then)*9/100000, 1))
}

// Original is the sender's sequence number behind number as the receiver
// knows it (its encoding's, for a simulcast receiver), if it is recent
// and was the number of a packet the receiver was sent or is owed. A
// receiver never adapted has the sender's numbers, but for a simulcast
// one, which has none before it took an encoding.
func (r *Replica) Original(number uint16, simulcast bool) (uint16, bool) {
	if r.RW.Started == 0 {
		return number, !simulcast
	}
	return r.RW.Original(number - r.Sim.Shift.Seq)
}

// FrameSent says whether the receiver was sent frame's packets (its
// number as the receiver knows it), while the state remembers the frame
// (known); a receiver never adapted gets every frame.
func (r *Replica) FrameSent(frame uint16) (sent, known bool) {
	if r.RW.Started == 0 {
		return true, true
	}
	return r.RW.Frame(frame - r.Sim.Shift.Frame)
}
