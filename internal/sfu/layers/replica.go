// Package layers applies, per receiver, a decode target of a sender's
// scalable stream (temporal layers of AV1, VP8 or VP9, described by the
// dependency descriptor) where the receiver's decoder can follow it: down
// at once, up only at a frame that is a switch point of the higher target,
// and the renumbering that hides what was dropped on purpose. It is the Go
// reference of bpf/layers.h, and the user plane's code. Which target a
// receiver gets is package ratecontrol's choice.
package layers

import (
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
)

// AllTargets as a target or a current decode target: every layer, the
// sender's numbers (LAYERS_ALL). NoVideo: no video at all, the receiver's
// video paused (LAYERS_NONE). MaxTargets is how many decode targets a
// structure may have for the data planes to adapt it (LAYERS_MAX_TARGETS).
const (
	AllTargets = 0xff
	NoVideo    = 0xfe
	MaxTargets = 8
)

// DTIs are a frame's decode target indications, 2 bits per target, as the
// data plane's templates hold them.
type DTIs uint16

// PackDTIs packs up to MaxTargets indications.
func PackDTIs(d []dd.DTI) DTIs {
	var p DTIs
	for t, v := range d[:min(len(d), MaxTargets)] {
		p |= DTIs(v&3) << (2 * t)
	}
	return p
}

// Of is target's indication.
func (d DTIs) Of(target uint8) dd.DTI { return dd.DTI(d >> (2 * (target % MaxTargets)) & 3) }

// AllSwitch: the frame that attaches a structure (a key frame) is a switch
// point of every target (DTIS_ALL_SWITCH).
const AllSwitch DTIs = 0xaaaa

// Frame is what every receiver's decision needs of one packet (struct
// frame_info): its place in the stream and, if its template is known,
// the targets it serves.
type Frame struct {
	Packet  rewrite.Packet // Forward is each receiver's
	DTIs    DTIs
	Known   bool
	Key     bool  // a key frame's first packet: where paused video resumes (FRAME_KEY)
	Targets uint8 // of the structure in force
	VP8     VP8   // a VP8 payload's picture numbering (a simulcast encoding's: rewritten)
}

// Verdict is what becomes of a packet for one receiver (enum layer_verdict).
type Verdict uint8

const (
	AsIs    Verdict = iota // never adapted: as the sender sent it
	Send                   // under the new number
	Drop                   //
	Padding                // emptied to padding under the new number
	Other                  // of a simulcast encoding the receiver does not take: not its stream (no number, no loss; user plane only)
)

// Replica is one receiver's adaptation of one sender's stream (struct
// replica_layers): the decode target in force, which moves only at a
// frame's start (down at once, up at a switch point of the target), and
// the renumbering that hides what is dropped on purpose.
type Replica struct {
	Current uint8
	// SwitchWait: since when (ns, the data plane's clock) an up-switch
	// waits for a switch point; 0: none. The agent asks for a key frame
	// when that lasts (KeyFrameDue).
	SwitchWait uint64
	RW         rewrite.State
	// Sim is its place among a simulcast sender's encodings (simulcast.go).
	Sim Simulcast
}

// NewReplica has never been adapted.
func NewReplica() Replica { return Replica{Current: AllTargets, Sim: Simulcast{Encoding: NoEncoding}} }

// Decide is the data plane's decision for this receiver, whose target is
// target (AllTargets: every layer), at now (ns).
func (r *Replica) Decide(f *Frame, target uint8, now uint64) (uint16, Verdict) {
	if target == AllTargets && r.Current == AllTargets && r.RW.Started == 0 {
		return f.Packet.Seq, AsIs
	}
	late := r.RW.Late(f.Packet.Seq)
	if f.Known && f.Targets > 0 && !late {
		// Past the structure's targets (a key frame's first packet moves
		// it down, but may come late): the highest the structure has.
		if r.Current < NoVideo && r.Current >= f.Targets {
			r.Current = f.Targets - 1
		}
		if f.Packet.Start { // a late start must not switch mid-stream
			r.switchAt(f, target, now)
		}
	}
	p := f.Packet
	p.Forward = r.Current != NoVideo && (!f.Known || r.Current == AllTargets || f.DTIs.Of(r.Current) != dd.NotPresent)
	if forward, known := r.RW.Frame(p.Frame); late && known && !p.Padding {
		p.Forward = forward // a late packet goes as its frame went
	}
	n, v := r.RW.Rewrite(p)
	switch v {
	case rewrite.Send:
		return n, Send
	case rewrite.SendAsPadding:
		return n, Padding
	}
	return 0, Drop
}

// switchAt moves the target in force at a frame's first packet: down at
// once, up at a switch point of the chosen target; paused, the decoder
// lost its references, so video resumes only at a key frame.
func (r *Replica) switchAt(f *Frame, target uint8, now uint64) {
	chosen := target
	if target != NoVideo {
		chosen = min(target, f.Targets-1)
	}
	switch {
	case chosen == NoVideo:
		r.Current, r.SwitchWait = NoVideo, 0
	case r.Current == NoVideo:
		r.waitFor(f.Key, chosen, now)
	case chosen < r.Current:
		r.Current, r.SwitchWait = chosen, 0
	case chosen > r.Current:
		r.waitFor(f.DTIs.Of(chosen) == dd.Switch, chosen, now)
	default:
		r.SwitchWait = 0
	}
}

// waitFor takes chosen at a switch point, or notes since when it waits.
func (r *Replica) waitFor(switchPoint bool, chosen uint8, now uint64) {
	if switchPoint {
		r.Current, r.SwitchWait = chosen, 0
	} else if r.SwitchWait == 0 {
		r.SwitchWait = now
	}
}

// KeyFrameDue says whether an up-switch waiting since switchWait (0: none)
// has waited after or longer at now: time to ask the sender for a key
// frame, a switch point of every target.
func KeyFrameDue(switchWait, now uint64, after time.Duration) bool {
	return switchWait != 0 && now-switchWait >= uint64(after)
}
