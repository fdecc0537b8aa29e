package dataplane

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"unsafe"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
)

// kernelLeg is one receiver of one stream in the eBPF plane: its slot in
// the program's per-receiver maps and its transport-wide numbers. It is
// the Leg handle the agent holds and, for the slow path, the receiver's
// state as forwarding takes it, read from and written to the same maps.
type kernelLeg struct {
	Receiver
	d       *DataPlane
	sender  netip.AddrPort // whose stream
	slot    uint32
	twcc    uint32  // twcc_legs index + 1; 0: none
	out     counter // what the slow path sent it
	removed atomic.Bool
}

var _ Leg = (*kernelLeg)(nil)

// Leg is Plane.Leg.
func (d *DataPlane) Leg(from, to netip.AddrPort) (Leg, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[unmapped(from)]
	if !ok {
		return nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, l := range s.legs {
		if l.To == unmapped(to) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("dataplane: %v does not receive %v", to, from)
}

// Arrivals is Plane.Arrivals.
func (d *DataPlane) Arrivals(from netip.AddrPort) (*ArrivalLog, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[unmapped(from)]
	if !ok || s.arrivals == 0 {
		return nil, fmt.Errorf("dataplane: no arrival log of %v", from)
	}
	return &ArrivalLog{log: d.twcc.leg(s.arrivals - 1)}, nil
}

// Send is Plane.Send.
func (d *DataPlane) Send(p []byte, from, to netip.AddrPort) error {
	return d.fwd.writeTo(p, unmapped(from), unmapped(to))
}

func (l *kernelLeg) SetTarget(target int) error {
	if l.removed.Load() {
		return errLegGone
	}
	return l.d.objs.ReplicaTargets.Put(l.slot, targetValue(target))
}

func (l *kernelLeg) State() (ReceiverLayers, error) {
	if l.removed.Load() {
		return ReceiverLayers{}, errLegGone
	}
	var target uint32
	var st sfuReplicaLayers
	if err := l.d.objs.ReplicaTargets.Lookup(l.slot, &target); err != nil {
		return ReceiverLayers{}, err
	}
	if err := l.d.objs.ReplicaAdapt.Lookup(l.slot, &st); err != nil {
		return ReceiverLayers{}, err
	}
	return ReceiverLayers{Target: targetOf(uint8(target)), Current: targetOf(st.Current),
		SwitchWaiting: waited(st.SwitchWait, coarseNow())}, nil
}

func (l *kernelLeg) Original(number uint16) (uint16, bool) {
	var st sfuReplicaLayers
	if l.removed.Load() || l.d.objs.ReplicaAdapt.Lookup(l.slot, &st) != nil {
		return 0, false
	}
	if st.Rw.Started == 0 {
		return number, true
	}
	rw := rewriteState(&st.Rw)
	return rw.Original(number)
}

func (l *kernelLeg) FrameSent(frame uint16) (sent, known bool) {
	var st sfuReplicaLayers
	if l.removed.Load() || l.d.objs.ReplicaAdapt.Lookup(l.slot, &st) != nil {
		return false, false
	}
	if st.Rw.Started == 0 {
		return true, true
	}
	rw := rewriteState(&st.Rw)
	return rw.Frame(frame)
}

func (l *kernelLeg) Send(p []byte, twccOff int) error {
	if l.removed.Load() {
		return errLegGone
	}
	if tw := l.twccState(); tw != nil && twccOff > 0 && twccOff+2 <= len(p) {
		stampTWCC(p, twccOff, tw.take(len(p)))
	}
	return l.d.fwd.writeTo(p, l.From, l.To)
}

func (l *kernelLeg) Sent(seq uint16) (Sent, bool) {
	if tw := l.twccState(); tw != nil {
		return tw.sent(seq)
	}
	return Sent{}, false
}

func (l *kernelLeg) TWCC() bool { return l.twcc != 0 }

func (l *kernelLeg) twccState() *legTWCC {
	if l.twcc == 0 || l.removed.Load() {
		return nil
	}
	return l.d.twcc.leg(l.twcc - 1)
}

// The slow path: what the program handed to the stack, forwarded in user
// space on the program's state.

// handle takes a datagram the program passed up: STUN and feedback go to
// the agent, media is forwarded.
func (d *DataPlane) handle(c *mediaConn, p []byte, from netip.AddrPort, b *replicaBatch) {
	cl := Classify(p)
	if !cl.Replicate {
		if (cl.Outcome == Stun || cl.Outcome == RTCPToAgent) && d.cfg.Upcall != nil {
			d.cfg.Upcall(p, from, c.conn)
		}
		return
	}
	d.mu.Lock()
	s := d.streams[from]
	var st *slowStream
	if s != nil {
		if _, ok := s.source(cl.SSRC); ok {
			st = &slowStream{stream: s, d: d, views: s.views}
		}
	}
	d.mu.Unlock()
	if st == nil {
		d.slow[UnknownSender].add(len(p))
		return
	}
	d.fwd.forward(st, p, cl, b)
}

// slowStream is a stream as the slow path takes it: its receivers as they
// were when the packet came.
type slowStream struct {
	*stream
	d     *DataPlane
	views []replicaState
}

func (s *stream) source(ssrc uint32) (Source, bool) {
	for _, src := range s.sources {
		if src.SSRC == ssrc {
			return src, true
		}
	}
	return Source{}, false
}

func (s *slowStream) replicas() []replicaState { return s.views }

func (s *slowStream) arrived(seq uint16, size int) {
	if s.arrivals != 0 {
		s.d.twcc.leg(s.arrivals-1).arrived(seq, size)
	}
}

func (s *slowStream) received(bytes int, frameEnd bool) { s.in.addFrame(bytes, frameEnd) }

func (s *slowStream) heard(level uint8, voiced bool) { s.levels.add(level, voiced) }

func (s *slowStream) seenOrKeep(_ Source, seq uint16, ts uint32, p []byte) bool {
	return s.history && s.d.kernelSeenOrKeep(s.id, seq, ts, p)
}

// encodingSent: the eBPF data plane has no simulcast (SetStream refuses it).
func (s *slowStream) encodingSent(Source, int, described, uint64) uint8 { return 0 }

func (s *slowStream) frame(p []byte, hdr int, src Source, size int) layers.Frame {
	s.vmu.Lock()
	f, layer, structure := frameOf(p, hdr, src.DDExt, &s.templates)
	if layer >= 0 {
		s.bytes[layer].add(size)
	}
	s.vmu.Unlock()
	if structure != nil {
		s.d.installStructure(s.id, structure)
	}
	return f
}

func (l *kernelLeg) receiver() Receiver { return l.Receiver }

// The eBPF data plane has no simulcast (SetStream refuses it).
func (l *kernelLeg) decideEncoding(*layers.Frame, uint8, uint32, uint8, uint64) (layers.Numbers, layers.Verdict, bool) {
	return layers.Numbers{}, layers.Other, false
}

func (l *kernelLeg) encodingInForce() (uint8, layers.Numbers) {
	return layers.NoEncoding, layers.Numbers{}
}

func (l *kernelLeg) Packet(number uint16) ([]byte, bool) {
	seq, ok := l.Original(number)
	if !ok {
		return nil, false
	}
	return l.d.Packet(l.sender, seq)
}

func (l *kernelLeg) waiting() bool {
	var w uint32
	return l.d.objs.ReplicaGates.Lookup(l.slot, &w) == nil && w != 0
}

func (l *kernelLeg) open() { _ = l.d.objs.ReplicaGates.Put(l.slot, uint32(0)) }

func (l *kernelLeg) transportWide() *legTWCC { return l.twccState() }

func (l *kernelLeg) replicated(bytes int, frameEnd bool) { l.out.addFrame(bytes, frameEnd) }

// decide takes the program's claim on the receiver's state (layers_claim),
// runs the Go reference on it and writes it back.
func (l *kernelLeg) decide(f *layers.Frame, now uint64) (uint16, layers.Verdict, bool) {
	var target uint32
	if l.d.objs.ReplicaTargets.Lookup(l.slot, &target) != nil {
		return 0, layers.AsIs, false
	}
	st := (*sfuReplicaLayers)(unsafe.Pointer(&l.d.adapt[uintptr(l.slot)*unsafe.Sizeof(sfuReplicaLayers{})]))
	if !atomic.CompareAndSwapUint32(&st.Busy, 0, 1) {
		return 0, 0, true
	}
	defer atomic.StoreUint32(&st.Busy, 0)
	r := layers.Replica{Current: st.Current, SwitchWait: st.SwitchWait, RW: rewriteState(&st.Rw)}
	n, v := r.Decide(f, uint8(min(target, layers.AllTargets)), now)
	st.Current, st.SwitchWait, st.Rw = r.Current, r.SwitchWait, kernelRewriteState(&r.RW)
	return n, v, false
}

// rewriteState is the kernel's struct rewrite_state as the Go reference's.
func rewriteState(s *sfuRewriteState) rewrite.State {
	return rewrite.State{Top: s.Top, Offset: s.Offset, LastFrame: s.LastFrame, LastFlags: s.LastFlags,
		Started: s.Started, Dropped: s.Dropped, Frames: s.Frames}
}

func kernelRewriteState(s *rewrite.State) sfuRewriteState {
	return sfuRewriteState{Top: s.Top, Offset: s.Offset, LastFrame: s.LastFrame, LastFlags: s.LastFlags,
		Started: s.Started, Dropped: s.Dropped, Frames: s.Frames}
}

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
	t := templatesOf(parsed.Structure)
	if d.objs.SenderTemplates.Put(id, t) == nil {
		s.structure = append(s.structure[:0], desc...)
		s.vmu.Lock()
		s.templates = t
		s.vmu.Unlock()
	}
}
