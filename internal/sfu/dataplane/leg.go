package dataplane

import (
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Leg is a data plane's side of one receiver of one sender's stream: what
// the SFU's agent asks of it for that receiver alone. A leg handle goes
// stale when the receiver leaves the stream (its calls then fail).
type Leg interface {
	// SetTarget sets the decode target the receiver gets of the sender's
	// video: EveryLayer, Paused, or 0 up to the structure's count less one.
	// It takes effect where the receiver's decoder can follow (bpf/layers.h).
	SetTarget(target int) error
	// State is the receiver's rate adaptation as the data plane has it.
	State() (ReceiverLayers, error)
	// Original is the sender's sequence number behind number as the
	// receiver knows it (its NACKs name its numbers), if it is recent and
	// was the number of a packet the receiver was sent or is owed; a
	// receiver never adapted has the sender's numbers.
	Original(number uint16) (uint16, bool)
	// Packet is the sender's packet behind number (Original's) from the
	// history, as this receiver is sent it (a simulcast encoding's under
	// the receiver's SSRC, timestamps and frame numbers) but for its
	// sequence number, which stays the sender's. One call: a simulcast
	// receiver's switch between Original and the lookup would find
	// another encoding's packet.
	Packet(number uint16) ([]byte, bool)
	// FrameSent says whether the receiver was sent frame's packets (false:
	// its layer was dropped, or the receiver's video paused), while the
	// leg remembers the frame (known); a receiver never adapted gets every
	// frame.
	FrameSent(frame uint16) (sent, known bool)
	// Send sends p, a packet of the SFU's own (a retransmission, a probe),
	// from the leg's SFU address to its receiver. With transport-wide
	// numbers, the two bytes at twccOff (> 0) take the leg's next one,
	// logged as sent now.
	Send(p []byte, twccOff int) error
	// Sent is what transport-wide sequence number seq went out as, while
	// the leg's log holds it.
	Sent(seq uint16) (Sent, bool)
	// TWCC says whether the leg has transport-wide numbers.
	TWCC() bool
}

// Targets as SetTarget takes them and ReceiverLayers reports them.
const (
	EveryLayer = -1 // the sender's stream as it is
	Paused     = -2 // no video; audio goes on
)

// ReceiverLayers is one receiver's adaptation.
type ReceiverLayers struct {
	Target  int // asked for (SetTarget)
	Current int // in force; EveryLayer also when never adapted
	// SwitchWaiting is how long an up-switch (or a resumption) has waited
	// for a switch point (0: none): the agent asks for a key frame when
	// it lasts.
	SwitchWaiting time.Duration
	// EncodingSSRC: the SSRC of the simulcast encoding the receiver takes
	// (0: none), whose numbers Original gives.
	EncodingSSRC uint32
}

// targetValue is a target as the data planes hold it.
func targetValue(target int) uint32 {
	switch {
	case target == Paused:
		return layers.NoVideo
	case target < 0 || target >= layers.NoVideo:
		return layers.AllTargets
	}
	return uint32(target)
}

func targetOf(v uint8) int {
	switch v {
	case layers.AllTargets:
		return EveryLayer
	case layers.NoVideo:
		return Paused
	}
	return int(v)
}
