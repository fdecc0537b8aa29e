// Package ratecontrol is the SFU's rate control, as policy without I/O:
// a send-side bandwidth estimate per receiver's link from its
// transport-wide feedback (delay-based and loss-based, as Google
// Congestion Control; the REMB a receiver sends where it has no
// transport-wide numbers), probes before going up, the decode target each
// of the link's streams gets within the estimate (paused when even the
// lowest layer does not fit), and the budget its retransmissions are
// paced within. Package leg wires it to the data plane and the wire.
package ratecontrol

import (
	"time"

	"github.com/pion/rtcp"
)

// Ack is one packet a leg sent, as the receiver's feedback reports it.
type Ack struct {
	Seq      uint16
	Sent     time.Duration // CLOCK_MONOTONIC, as the leg's log has it
	Size     int           // RTP bytes
	Received bool
	// Arrived is when it reached the receiver, on the receiver's clock
	// (only differences mean anything; the clock is one per browser, so
	// the legs of one receiver compare).
	Arrived time.Duration
}

// SentPacket is what a leg's log says a transport-wide sequence number
// went out as.
type SentPacket struct {
	At   time.Duration
	Size int
}

// FeedbackReader turns one leg's transport-cc feedback into Acks: it
// unwraps the receiver's reference time and reports each sequence number
// once, however often the feedback repeats it (a packet reported lost and
// then received is reported again, received).
type FeedbackReader struct {
	started  bool
	lastRef  int64 // unwrapped reference time, 64 ms units
	extended bool
	highest  int64       // highest extended sequence number reported
	seen     [1024]int64 // per extended number mod 1024: number << 1 | received
}

// refWrap is the 24-bit reference time's period, in its 64 ms units.
const refWrap = 1 << 24

// Acks is the feedback's packets the log (sent) still knows, in sequence
// order; packets reported before are left out.
func (r *FeedbackReader) Acks(fb *rtcp.TransportLayerCC, sent func(seq uint16) (SentPacket, bool)) []Ack {
	ref := int64(fb.ReferenceTime)
	if r.started {
		// The unwrapped reference time closest to the last one.
		d := ((ref-r.lastRef)%refWrap + refWrap + refWrap/2) % refWrap
		ref = r.lastRef + d - refWrap/2
	}
	r.started, r.lastRef = true, ref
	arrival := time.Duration(ref) * 64 * time.Millisecond
	var out []Ack
	deltas := fb.RecvDeltas
	seq := fb.BaseSequenceNumber
	for _, status := range statuses(fb) {
		a := Ack{Seq: seq}
		if (status == rtcp.TypeTCCPacketReceivedSmallDelta || status == rtcp.TypeTCCPacketReceivedLargeDelta) && len(deltas) > 0 {
			arrival += time.Duration(deltas[0].Delta) * time.Microsecond
			deltas = deltas[1:]
			a.Received, a.Arrived = true, arrival
		}
		if s, ok := sent(seq); ok && r.fresh(seq, a.Received) {
			a.Sent, a.Size = s.At, s.Size
			out = append(out, a)
		}
		seq++
	}
	return out
}

// fresh says whether seq's report is news.
func (r *FeedbackReader) fresh(seq uint16, received bool) bool {
	ext := 1<<16 + int64(seq)
	if r.extended {
		ext = r.highest + int64(int16(seq-uint16(r.highest)))
	}
	r.extended, r.highest = true, max(r.highest, ext)
	state := ext << 1
	if received {
		state |= 1
	}
	slot := &r.seen[ext%int64(len(r.seen))]
	if *slot == state || *slot == ext<<1|1 {
		return false
	}
	*slot = state
	return true
}

// statuses is the feedback's status per packet, PacketStatusCount of them.
func statuses(fb *rtcp.TransportLayerCC) []uint16 {
	out := make([]uint16, 0, fb.PacketStatusCount)
	for _, c := range fb.PacketChunks {
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			for range c.RunLength {
				out = append(out, c.PacketStatusSymbol)
			}
		case *rtcp.StatusVectorChunk:
			out = append(out, c.SymbolList...)
		}
	}
	if len(out) > int(fb.PacketStatusCount) {
		out = out[:fb.PacketStatusCount]
	}
	return out
}
