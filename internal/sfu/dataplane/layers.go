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

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Layers is a stream's rate adaptation as a data plane sees it: the
// decode targets of the sender's structure in force, and the bytes each
// target has carried so far (a target counts the bytes of every layer it
// includes).
type Layers struct {
	Targets int      // 0: no structure known (nothing is adapted)
	Bytes   []uint64 // per target, cumulative since the stream began
	// Encodings of a simulcast video, those live, lowest first: their
	// targets follow one another in Bytes (each cumulative within its
	// own encoding).
	Encodings []Encoding
}

// Encoding is one live encoding of a simulcast video.
type Encoding struct {
	SSRC    uint32
	Targets int
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

// Layers reports the stream's decode targets and their bytes.
func (d *DataPlane) Layers(from netip.AddrPort) (Layers, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[addrport.Unmap(from)]
	if !ok {
		return Layers{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	views, err := d.encodingViews(s, true)
	if err != nil {
		return Layers{}, err
	}
	if s.sim != nil {
		return views.layers(coarseNow()), nil
	}
	var tbl sfuLayerTemplates
	if err := d.objs.SenderTemplates.Lookup(s.id, &tbl); err != nil {
		return Layers{}, err
	}
	return Layers{Targets: int(tbl.Targets), Bytes: cumulative(views[0].bytes[:], int(tbl.Targets))}, nil
}

// Packet is Plane.Packet: from the kernel's history of the sender's video.
func (d *DataPlane) Packet(from netip.AddrPort, seq uint16) ([]byte, bool) {
	d.mu.Lock()
	s, ok := d.streams[addrport.Unmap(from)]
	d.mu.Unlock()
	if !ok {
		return nil, false
	}
	d.mu.Lock()
	kept := s.enc[0].history
	d.mu.Unlock()
	if !kept {
		return nil, false
	}
	p, _, ok := d.kernelPacket(s.id, seq)
	return p, ok
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
		d.objs.ReplicaAdapt.Put(slot, sfuReplicaLayers{Current: layers.AllTargets, Sim: sfuSimState{Encoding: layers.NoEncoding}}))
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
			if d.sendPadding(PaddingPacket(ev.Rtp[:], ev.Number), from, to) != nil {
				d.slow[CloneFailed].add(len(ev.Rtp))
			}
		}
	}
}

const (
	videoEventStructure = 1
	videoEventPadding   = 2
)

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
