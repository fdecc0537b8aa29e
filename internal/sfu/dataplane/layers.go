package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
)

// Layers is a stream's rate adaptation as a data plane sees it: the
// decode targets of the sender's structure in force, the bytes each
// target has carried so far (a target counts the bytes of every layer it
// includes), and each receiver's state.
type Layers struct {
	Targets   int      // 0: no structure known (nothing is adapted)
	Bytes     []uint64 // per target, cumulative since the stream began
	Receivers []ReceiverLayers
}

// ReceiverLayers is one receiver's adaptation.
type ReceiverLayers struct {
	To      netip.AddrPort
	Target  int // asked for (SetTarget); -1: every layer
	Current int // in force; -1: never adapted (the sender's stream as it is)
	// SwitchWaiting is how long an up-switch has waited for a switch
	// point (0: none): the agent asks for a key frame when it lasts.
	SwitchWaiting time.Duration
}

// targetValue is SetTarget's target as the data planes hold it.
func targetValue(target int) uint32 {
	if target < 0 || target >= layers.AllTargets {
		return layers.AllTargets
	}
	return uint32(target)
}

func targetOf(v uint8) int {
	if v == layers.AllTargets {
		return -1
	}
	return int(v)
}

// coarseNow is the data plane's clock (bpf_ktime_get_coarse_ns).
func coarseNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return uint64(ts.Nano())
}

func waited(since, now uint64) time.Duration {
	if since == 0 || now < since {
		return 0
	}
	return time.Duration(now - since)
}

// SetTarget sets the decode target the receiver at `to` gets of the
// sender at from's video (-1: every layer). It takes effect where the
// receiver's decoder can follow (bpf/layers.h).
func (d *DataPlane) SetTarget(from, to netip.AddrPort, target int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	slot, err := d.slotTo(from, to)
	if err != nil {
		return err
	}
	return d.objs.ReplicaTargets.Put(slot, targetValue(target))
}

// slotTo is the replica slot of the receiver at to of the sender at from.
func (d *DataPlane) slotTo(from, to netip.AddrPort) (uint32, error) {
	s, ok := d.streams[unmapped(from)]
	if !ok {
		return 0, fmt.Errorf("dataplane: no stream from %v", from)
	}
	for i, r := range s.receivers {
		if r.To == unmapped(to) {
			return s.replicas[i], nil
		}
	}
	return 0, fmt.Errorf("dataplane: %v does not receive %v", to, from)
}

// Layers reports the stream's rate adaptation.
func (d *DataPlane) Layers(from netip.AddrPort) (Layers, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[unmapped(from)]
	if !ok {
		return Layers{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	var tbl sfuLayerTemplates
	if err := d.objs.SenderTemplates.Lookup(s.id, &tbl); err != nil {
		return Layers{}, err
	}
	out := Layers{Targets: int(tbl.Targets)}
	var perLayer [layers.MaxTargets]uint64
	for l := range perLayer {
		c, err := sumStats(d.objs.LayerBytes, s.id*layers.MaxTargets+uint32(l))
		if err != nil {
			return Layers{}, err
		}
		perLayer[l] = c.Bytes
	}
	out.Bytes = cumulative(perLayer[:], out.Targets)
	now := coarseNow()
	for i, slot := range s.replicas {
		var target uint32
		var st sfuReplicaLayers
		if err := errors.Join(d.objs.ReplicaTargets.Lookup(slot, &target), d.objs.ReplicaAdapt.Lookup(slot, &st)); err != nil {
			return Layers{}, err
		}
		out.Receivers = append(out.Receivers, ReceiverLayers{To: s.receivers[i].To, Target: targetOf(uint8(target)),
			Current: targetOf(st.Current), SwitchWaiting: waited(st.SwitchWait, now)})
	}
	return out, nil
}

// cumulative turns bytes per layer (the lowest target a frame serves)
// into bytes per target.
func cumulative(perLayer []uint64, targets int) []uint64 {
	out := make([]uint64, targets)
	var sum uint64
	for t := range out {
		sum += perLayer[t]
		out[t] = sum
	}
	return out
}

// Original is the sender's sequence number behind number as the receiver
// at to knows it (its NACKs name its numbers), if it is recent. A receiver
// never adapted has the sender's numbers.
func (d *DataPlane) Original(from, to netip.AddrPort, number uint16) (uint16, bool) {
	d.mu.Lock()
	slot, err := d.slotTo(from, to)
	d.mu.Unlock()
	var st sfuReplicaLayers
	if err != nil || d.objs.ReplicaAdapt.Lookup(slot, &st) != nil {
		return 0, false
	}
	if st.Rw.Started == 0 {
		return number, true
	}
	rw := rewriteState(&st.Rw)
	return rw.Original(number)
}

// rewriteState is the kernel's struct rewrite_state as the Go reference's.
func rewriteState(s *sfuRewriteState) rewrite.State {
	return rewrite.State{Top: s.Top, Offset: s.Offset, LastFrame: s.LastFrame, LastFlags: s.LastFlags,
		Started: s.Started, Dropped: s.Dropped, Frames: s.Frames}
}

// resetLayers clears what a previous stream or receiver left in a slot.
func (d *DataPlane) resetSenderLayers(id uint32) error {
	zero := make([]sfuSfuStats, ebpf.MustPossibleCPU())
	errs := []error{d.objs.SenderTemplates.Put(id, sfuLayerTemplates{})}
	for l := range uint32(layers.MaxTargets) {
		errs = append(errs, d.objs.LayerBytes.Put(id*layers.MaxTargets+l, zero))
	}
	return errors.Join(errs...)
}

func (d *DataPlane) resetReplicaLayers(slot uint32) error {
	return errors.Join(d.objs.ReplicaTargets.Put(slot, uint32(layers.AllTargets)),
		d.objs.ReplicaAdapt.Put(slot, sfuReplicaLayers{Current: layers.AllTargets}))
}

// readEvents serves video_events until the reader is closed: structures
// become templates, padding requests padding packets.
func (d *DataPlane) readEvents(r *ringbuf.Reader) {
	var rec ringbuf.Record
	for {
		if err := r.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			continue
		}
		var ev sfuVideoEvent
		if binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &ev) != nil {
			continue
		}
		switch ev.Kind {
		case videoEventStructure:
			d.installStructure(ev.Sender, ev.Dd[:min(int(ev.Len), len(ev.Dd))])
		case videoEventPadding:
			from, to := replicaAddrs(&ev.R)
			if d.cfg.Send != nil {
				_ = d.cfg.Send(paddingPacket(ev.Rtp[:], ev.Number), from, to)
			}
		}
	}
}

const (
	videoEventStructure = 1
	videoEventPadding   = 2
)

// installStructure installs the templates of a structure a sender attached.
func (d *DataPlane) installStructure(id uint32, desc []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.byID[id]
	if s == nil || sameStructure(s.structure, desc) {
		return
	}
	parsed, err := dd.Parse(desc, nil)
	if err != nil || parsed.Structure == nil {
		return
	}
	if d.objs.SenderTemplates.Put(id, templatesOf(parsed.Structure)) == nil {
		s.structure = append(s.structure[:0], desc...)
	}
}

// sameStructure: two descriptors attaching the same structure (their
// mandatory fields, the frame's own, aside), so the installed templates
// stand and are not rewritten under the data plane's readers.
func sameStructure(a, b []byte) bool { return len(a) > 3 && len(b) > 3 && bytes.Equal(a[3:], b[3:]) }

func replicaAddrs(r *sfuReplica) (from, to netip.AddrPort) {
	src, dst := netip.AddrFrom16(r.Saddr.Bytes), netip.AddrFrom16(r.Daddr.Bytes)
	if r.Family == afInet {
		src, dst = netip.AddrFrom4([4]byte(r.Saddr.Bytes[:4])), netip.AddrFrom4([4]byte(r.Daddr.Bytes[:4]))
	}
	return netip.AddrPortFrom(src, netorder.Port(r.Sport)), netip.AddrPortFrom(dst, netorder.Port(r.Dport))
}
