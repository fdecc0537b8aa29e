package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Outcome is what the data plane did with a datagram (bpf/sfu_outcome.h).
type Outcome uint32

// In the order of enum sfu_outcome.
const (
	NotMedia Outcome = iota
	Stun
	RTCPToAgent
	Other
	Malformed
	UnknownSender
	NoReceivers
	Replicated
	Replica
	CloneFailed
	RewriteFailed
	FamilyMismatch
	Segmented
	SourceRefused
	NoRoute
	Gated
	LayerDropped
	PaddingUpcall
	EventLost
	LayerBusy
	Duplicate
	OtherEncoding
	// Encrypted media (the user plane only):
	DTLS
	Unprotected
	Unauthentic
	// Probe: a sender's bandwidth probe, padding on SSRC 0 or on its RTX
	// SSRC, its transport-wide number logged, nothing forwarded (counted
	// in user space: the eBPF program hands it up as unknown_sender).
	Probe
	outcomeMax
)

var outcomeNames = [...]string{
	"not_media", "stun", "rtcp_to_agent", "other", "malformed", "unknown_sender", "no_receivers",
	"replicated", "replica", "clone_failed", "rewrite_failed", "family_mismatch", "segmented", "source_refused", "no_route",
	"gated", "layer_dropped", "padding_upcall", "event_lost", "layer_busy", "duplicate",
	"other_encoding",
	"dtls", "unprotected", "unauthentic",
	"probe",
}

func (o Outcome) String() string {
	if o < outcomeMax {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint32(o))
}

// Counter is packets, UDP payload bytes, and of video the frames (packets
// with the marker bit: a frame's last).
type Counter struct{ Packets, Bytes, Frames uint64 }

// Add is the sum of two counters.
func (c Counter) Add(o Counter) Counter {
	return Counter{Packets: c.Packets + o.Packets, Bytes: c.Bytes + o.Bytes, Frames: c.Frames + o.Frames}
}

// StreamStats is what a sender sent into a data plane, and what went out
// to each of its receivers (in SetStream's order).
type StreamStats struct {
	In  Counter
	Out []ReceiverStats
}

// ReceiverStats is what one receiver of a stream was sent.
type ReceiverStats struct {
	To netip.AddrPort
	Counter
	Waiting bool // for the sender's next key frame (video streams only)
}

// Waiting is how many receivers wait for a key frame.
func (s StreamStats) Waiting() int {
	n := 0
	for _, r := range s.Out {
		if r.Waiting {
			n++
		}
	}
	return n
}

// Outcomes sums the per-CPU outcome counters.
func (d *DataPlane) Outcomes() (map[Outcome]Counter, error) {
	out := map[Outcome]Counter{}
	for o := Outcome(0); o < outcomeMax; o++ {
		c, err := sumStats(d.objs.Outcomes, uint32(o))
		if err != nil {
			return nil, fmt.Errorf("dataplane: outcome %v: %w", o, err)
		}
		out[o] = c.Add(d.slow[o].load())
	}
	return out, nil
}

// SlowPath is what the slow path did (of Outcomes): the datagrams the
// program handed to the stack that user space forwarded.
func (d *DataPlane) SlowPath() map[Outcome]Counter {
	out := map[Outcome]Counter{}
	for o := Outcome(0); o < outcomeMax; o++ {
		out[o] = d.slow[o].load()
	}
	return out
}

func sumStats(m *ebpf.Map, key uint32) (Counter, error) {
	var perCPU []sfuSfuStats
	if err := m.Lookup(key, &perCPU); err != nil {
		return Counter{}, err
	}
	var c Counter
	for _, s := range perCPU {
		c = c.Add(Counter{Packets: s.Packets, Bytes: s.Bytes, Frames: s.Frames})
	}
	return c, nil
}
