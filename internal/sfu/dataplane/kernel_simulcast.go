package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Simulcast in the eBPF plane. Each encoding has a slot of its own in the
// program's per-sender maps (templates, layer bytes, history, counters),
// taken when the slow path learns its SSRC: the program hands a packet of
// an unknown SSRC to the stack, and its stream id names the encoding
// (learnEncoding). The program decides for each receiver on its struct
// replica_layers (bpf/simulcast.h) and rewrites the replica; the slow path
// decides on the same state under the same claim (withClaim), with the Go
// reference (layers.Replica.DecideEncoding).

// encIndex is the encoding src is of (0 without simulcast).
func encIndex(src Source) uint8 {
	if src.Simulcast == nil {
		return 0
	}
	return src.Encoding
}

// encodingOf readies src's encoding in s (d.mu held): a slot of its own
// for an encoding above the first, its history.
func (d *DataPlane) encodingOf(s *stream, src Source) error {
	i := encIndex(src)
	if int(i) >= len(s.enc) {
		return fmt.Errorf("dataplane: SSRC %d: encoding %d", src.SSRC, i)
	}
	e := &s.enc[i]
	if i > 0 && !e.owned {
		slot, err := d.senderSlot()
		if err != nil {
			return err
		}
		e.slot, e.owned = slot, true
		d.bySlot[slot] = s
	}
	if src.Simulcast != nil {
		e.ssrc = src.SSRC
	}
	if src.History && !e.history {
		e.history = d.keepHistory(e.slot) == nil // without one, NACKs go to the sender
	}
	return nil
}

// releaseEncodings gives back what s's encodings hold (d.mu held); the
// first's slot is the stream's own.
func (d *DataPlane) releaseEncodings(s *stream) {
	for i := range s.enc {
		e := &s.enc[i]
		if i > 0 && !e.owned {
			continue
		}
		if e.history {
			d.dropHistory(e.slot)
		}
		delete(d.bySlot, e.slot)
		if e.owned {
			d.ids.Put(e.slot)
		}
	}
}

// resetEncodings starts s's video over (d.mu held): the encodings above
// the first give their slots back, the first (in the stream's own slot)
// forgets its structure, and none is live.
func (d *DataPlane) resetEncodings(s *stream) error {
	for i := 1; i < len(s.enc); i++ {
		if e := &s.enc[i]; e.owned {
			if e.history {
				d.dropHistory(e.slot)
			}
			delete(d.bySlot, e.slot)
			d.ids.Put(e.slot)
		}
		s.enc[i] = kernelEncoding{}
	}
	s.vmu.Lock()
	first := &s.enc[0]
	first.ssrc, first.structure, first.templates, first.bytes = 0, nil, sfuLayerTemplates{}, [layers.MaxTargets]counter{}
	s.vmu.Unlock()
	return errors.Join(d.resetSenderLayers(s.id), d.objs.SimulcastEncodings.Put(s.id, sfuSimEncodings{}))
}

// simEncodings is stream id's entry of simulcast_encodings, mapped: its
// times are read and written whole (atomically), as the program's CPUs
// write them.
func (d *DataPlane) simEncodings(id uint32) *sfuSimEncodings {
	return (*sfuSimEncodings)(unsafe.Pointer(&d.simEnc[uintptr(id)*unsafe.Sizeof(sfuSimEncodings{})]))
}

// learnEncoding adds the encoding an unknown SSRC's RTP packet names (by
// its stream id) to s, the stream of the packet's sender (d.mu held). A
// live encoding keeps its SSRC: a receiver's numbers on it go on from its
// own.
func (d *DataPlane) learnEncoding(from netip.AddrPort, s *stream, ssrc uint32, p []byte, hdr int) bool {
	src, replaced, ok := learntSource(s.sources, ssrc, p, hdr)
	if !ok || (replaced != 0 && d.encodingLive(s, src.Encoding)) {
		return false
	}
	sources := slices.DeleteFunc(slices.Clone(s.sources), func(x Source) bool { return replaced != 0 && x.SSRC == replaced })
	receivers := make([]Receiver, len(s.legs))
	for i, l := range s.legs {
		receivers[i] = l.Receiver
	}
	return d.setStream(from, append(sources, src), receivers) == nil
}

// encodingLive says whether s's encoding enc sent media lately.
func (d *DataPlane) encodingLive(s *stream, enc uint8) bool {
	return live(atomic.LoadUint64(&d.simEncodings(s.id).LastAt[enc%layers.MaxEncodings]), coarseNow())
}

// encodingViews is s's encodings as the program's maps have them (d.mu
// held); their bytes only if withBytes.
func (d *DataPlane) encodingViews(s *stream, withBytes bool) (*encodingViews, error) {
	seen := d.simEncodings(s.id)
	var out encodingViews
	s.vmu.Lock()
	defer s.vmu.Unlock()
	for i := range s.enc {
		e, o := &s.enc[i], &out[i]
		if i > 0 && !e.owned {
			continue
		}
		o.ssrc, o.lastAt, o.noDD, o.targets = e.ssrc, atomic.LoadUint64(&seen.LastAt[i]), seen.NoDd[i] != 0, int(e.templates.Targets)
		for l := range o.bytes {
			if !withBytes {
				break
			}
			c, err := sumStats(d.objs.LayerBytes, e.slot*layers.MaxTargets+uint32(l))
			if err != nil {
				return nil, err
			}
			o.bytes[l] = c.Bytes + e.bytes[l].load().Bytes
		}
	}
	return &out, nil
}

// encodingSent is simulcast_packet's update of simulcast_encodings, for
// what the slow path forwards: only its encoding's fields.
func (s *slowStream) encodingSent(src Source, size int, desc described, now uint64) uint8 {
	i := encIndex(src) % layers.MaxEncodings
	seen := s.d.simEncodings(s.id)
	switch desc {
	case undescribed:
		atomic.StoreUint64(&seen.LastAt[i], now)
		seen.NoDd[i] = 1
		s.enc[i].bytes[0].add(size)
	case withDescriptor:
		atomic.StoreUint64(&seen.LastAt[i], now)
		seen.NoDd[i] = 0
	}
	var lastAt [layers.MaxEncodings]uint64
	for e := range lastAt {
		lastAt[e] = atomic.LoadUint64(&seen.LastAt[e])
	}
	return topOf(&lastAt, now)
}

// shared is the receiver's state in the program's map, mapped.
func (l *kernelLeg) shared() *sfuReplicaLayers {
	return (*sfuReplicaLayers)(unsafe.Pointer(&l.d.adapt[uintptr(l.slot)*unsafe.Sizeof(sfuReplicaLayers{})]))
}

// withClaim runs decide on the receiver's state under the program's claim
// (layers_claim) and writes it back; false: another CPU was deciding, or
// the leg is gone (its slot may be another receiver's).
func (l *kernelLeg) withClaim(decide func(r *layers.Replica)) bool {
	return l.claimed(func(st *sfuReplicaLayers) {
		r := replicaFrom(st)
		decide(&r)
		storeReplica(st, &r)
	})
}

func (l *kernelLeg) claimed(f func(st *sfuReplicaLayers)) bool {
	st := l.shared()
	if l.removed.Load() || !atomic.CompareAndSwapUint32(&st.Busy, 0, 1) {
		return false
	}
	defer atomic.StoreUint32(&st.Busy, 0)
	f(st)
	return true
}

// replica is a copy of the receiver's state, taken under the claim: one
// taken while a CPU decides could join one decision's encoding to
// another's numbers.
func (l *kernelLeg) replica() (layers.Replica, error) {
	for range 1000 {
		var r layers.Replica
		if l.claimed(func(st *sfuReplicaLayers) { r = replicaFrom(st) }) {
			return r, nil
		}
		if l.removed.Load() {
			return layers.Replica{}, errLegGone
		}
		runtime.Gosched()
	}
	return layers.Replica{}, fmt.Errorf("dataplane: receiver %v: its state stays claimed", l.To)
}

// replicaFrom is the kernel's struct replica_layers as the Go reference's.
func replicaFrom(st *sfuReplicaLayers) layers.Replica {
	return layers.Replica{Current: st.Current, SwitchWait: st.SwitchWait, RW: rewriteState(&st.Rw), Sim: layers.Simulcast{
		Encoding: st.Sim.Encoding, Shift: numbersFrom(st.Sim.Shift), Last: numbersFrom(st.Sim.Last), LastAt: st.Sim.LastAt,
		Sent: st.Sim.Sent != 0, SwitchWait: st.Sim.SwitchWait,
	}}
}

func storeReplica(st *sfuReplicaLayers, r *layers.Replica) {
	st.Current, st.SwitchWait, st.Rw = r.Current, r.SwitchWait, kernelRewriteState(&r.RW)
	st.Sim.Encoding, st.Sim.Shift, st.Sim.Last, st.Sim.LastAt, st.Sim.SwitchWait =
		r.Sim.Encoding, kernelNumbers(r.Sim.Shift), kernelNumbers(r.Sim.Last), r.Sim.LastAt, r.Sim.SwitchWait
	st.Sim.Sent = 0
	if r.Sim.Sent {
		st.Sim.Sent = 1
	}
}

func numbersFrom(n sfuSimNumbers) layers.Numbers {
	return layers.Numbers{Seq: n.Seq, TS: n.Ts, Frame: n.Frame,
		VP8: layers.VP8{Picture: n.Vp8.Picture, TL0: n.Vp8.Tl0, KeyIdx: n.Vp8.Keyidx, Fields: n.Vp8.Fields}}
}

func kernelNumbers(n layers.Numbers) sfuSimNumbers {
	return sfuSimNumbers{Seq: n.Seq, Ts: n.TS, Frame: n.Frame,
		Vp8: sfuVp8Pictures{Picture: n.VP8.Picture, Tl0: n.VP8.TL0, Keyidx: n.VP8.KeyIdx, Fields: n.VP8.Fields}}
}

// target is the receiver's target in the program's map.
func (l *kernelLeg) target() (uint8, bool) {
	var target uint32
	if l.d.objs.ReplicaTargets.Lookup(l.slot, &target) != nil {
		return 0, false
	}
	return uint8(min(target, layers.AllTargets)), true
}

// decideEncoding takes the program's claim on the receiver's state and
// runs the Go reference on it (sim_decide).
func (l *kernelLeg) decideEncoding(f *layers.Frame, enc uint8, ts uint32, top uint8, now uint64) (n layers.Numbers, v layers.Verdict, busy bool) {
	target, ok := l.target()
	if !ok {
		return layers.Numbers{}, layers.Other, false
	}
	busy = !l.withClaim(func(r *layers.Replica) { n, v = r.DecideEncoding(f, enc, ts, target, top, now) })
	return n, v, busy
}

// encodingInForce is read under the claim (none while another CPU decides:
// a sender report the receiver then misses).
func (l *kernelLeg) encodingInForce() (enc uint8, shift layers.Numbers) {
	enc = layers.NoEncoding
	l.withClaim(func(r *layers.Replica) { enc, shift = r.Sim.Encoding, r.Sim.Shift })
	return enc, shift
}

// simulcast is the leg's stream's simulcast video and the views of its
// encodings, without their bytes (nil, nil without one).
func (l *kernelLeg) simulcast() (*Simulcast, *encodingViews, error) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	if l.stream.sim == nil {
		return nil, nil, nil
	}
	v, err := l.d.encodingViews(l.stream, false)
	return l.stream.sim, v, err
}

// encodingPacket is packet seq of encoding enc from the kernel's history.
func (l *kernelLeg) encodingPacket(enc uint8, seq uint16) ([]byte, bool) {
	l.d.mu.Lock()
	e := &l.stream.enc[enc%layers.MaxEncodings]
	slot, kept := e.slot, e.history && (enc == 0 || e.owned)
	l.d.mu.Unlock()
	if !kept {
		return nil, false
	}
	p, _, ok := l.d.kernelPacket(slot, seq)
	return p, ok
}
