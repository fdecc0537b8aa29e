package dataplane

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ebrtc/ebrtc/internal/addrport"
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
	stream  *stream        // (its fields under d.mu)
	slot    uint32
	twcc    uint32  // twcc_legs index + 1; 0: none
	out     counter // what the slow path sent it
	removed atomic.Bool
	asked   atomic.Int32 // the target as SetTarget had it (a simulcast receiver's is flat)
}

var _ Leg = (*kernelLeg)(nil)

// Leg is Plane.Leg.
func (d *DataPlane) Leg(from, to netip.AddrPort) (Leg, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[addrport.Unmap(from)]
	if !ok {
		return nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, l := range s.legs {
		if l.To == addrport.Unmap(to) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("dataplane: %v does not receive %v", to, from)
}

// Arrivals is Plane.Arrivals.
func (d *DataPlane) Arrivals(from netip.AddrPort) (*ArrivalLog, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[addrport.Unmap(from)]
	if !ok || s.arrivals == 0 {
		return nil, fmt.Errorf("dataplane: no arrival log of %v", from)
	}
	return &ArrivalLog{log: d.twcc.leg(s.arrivals - 1)}, nil
}

// Send is Plane.Send.
func (d *DataPlane) Send(p []byte, from, to netip.AddrPort) error {
	return d.fwd.writeTo(p, addrport.Unmap(from), addrport.Unmap(to))
}

func (l *kernelLeg) SetTarget(target int) error {
	if l.removed.Load() {
		return errLegGone
	}
	v := targetValue(target)
	if target >= 0 {
		sim, views, err := l.simulcast()
		if err != nil {
			return err
		}
		if sim != nil {
			v = views.target(target, coarseNow())
		}
	}
	l.asked.Store(int32(target))
	return l.d.objs.ReplicaTargets.Put(l.slot, v)
}

func (l *kernelLeg) State() (ReceiverLayers, error) {
	if l.removed.Load() {
		return ReceiverLayers{}, errLegGone
	}
	target, ok := l.target()
	r, err := l.replica()
	if !ok || err != nil {
		return ReceiverLayers{}, fmt.Errorf("dataplane: receiver %v: no state", l.To)
	}
	now := coarseNow()
	st := ReceiverLayers{Target: targetOf(target), Current: targetOf(r.Current), SwitchWaiting: waited(r.SwitchWait, now)}
	sim, views, err := l.simulcast()
	if sim != nil && err == nil {
		st = views.state(st, int(l.asked.Load()), &r, now)
	}
	return st, err
}

func (l *kernelLeg) Original(number uint16) (uint16, bool) {
	r, err := l.replica()
	if l.removed.Load() || err != nil {
		return 0, false
	}
	sim, _ := l.video()
	return r.Original(number, sim != nil)
}

// video is the leg's stream's simulcast video (nil: none) and what its
// packets are rewritten in.
func (l *kernelLeg) video() (*Simulcast, encodingFormat) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.stream.sim, formatOf(l.stream.sources)
}

func (l *kernelLeg) FrameSent(frame uint16) (sent, known bool) {
	r, err := l.replica()
	if l.removed.Load() || err != nil {
		return false, false
	}
	return r.FrameSent(frame)
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
	why := UnknownSender
	if s != nil {
		_, ok := s.source(cl.SSRC)
		if !ok && cl.Payload != nil && s.sim != nil {
			ok = d.learnEncoding(from, s, cl.SSRC, p, len(p)-len(cl.Payload))
		}
		if !ok {
			var q []byte
			var qcl Classified
			if q, qcl, why = repairedPacket(s.sources, p, cl, b.repaired); why == Replicated {
				p, cl, ok = q, qcl, true
			}
		}
		if ok {
			st = &slowStream{stream: s, d: d, views: s.views}
			for i := range s.enc {
				st.slots[i] = encodingSlot{slot: s.enc[i].slot, history: s.enc[i].history, ready: i == 0 || s.enc[i].owned}
			}
		} else {
			arrivedUnknown(s.sources, p, cl, len(p), b.rxAt, (&slowStream{stream: s, d: d}).arrived)
		}
	}
	d.mu.Unlock()
	if st == nil {
		d.slow[why].add(len(p))
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
	slots [layers.MaxEncodings]encodingSlot // its encodings' as they were
}

type encodingSlot struct {
	slot    uint32
	history bool
	ready   bool // the encoding has its slot (not one whose SetStream failed)
}

func (s *stream) source(ssrc uint32) (Source, bool) {
	for _, src := range s.sources {
		if src.SSRC == ssrc && ssrc != 0 { // (0: a simulcast video's stand-in, no SSRC; libwebrtc's first probes)
			return src, true
		}
	}
	return Source{}, false
}

func (s *slowStream) replicas() []replicaState { return s.views }

func (s *slowStream) arrived(seq uint16, size int, at time.Duration) {
	if s.arrivals != 0 {
		s.d.twcc.leg(s.arrivals-1).arrived(seq, size, at)
	}
}

func (s *slowStream) received(bytes int, frameEnd bool) { s.in.addFrame(bytes, frameEnd) }

func (s *slowStream) heard(level uint8, voiced bool) { s.levels.add(level, voiced) }

func (s *slowStream) seenOrKeep(src Source, seq uint16, ts uint32, p []byte) bool {
	e := s.slots[encIndex(src)%layers.MaxEncodings]
	return e.history && s.d.kernelSeenOrKeep(e.slot, seq, ts, p)
}

func (s *slowStream) frame(p []byte, hdr int, src Source, size int) layers.Frame {
	i := encIndex(src) % layers.MaxEncodings
	s.vmu.Lock()
	e := &s.enc[i]
	f, layer, structure := frameOf(p, hdr, src.DDExt, &e.templates)
	if layer >= 0 {
		e.bytes[layer].add(size)
	}
	s.vmu.Unlock()
	if structure != nil && s.slots[i].ready {
		s.d.installStructure(s.slots[i].slot, structure)
	}
	return f
}

func (l *kernelLeg) receiver() Receiver { return l.Receiver }

func (l *kernelLeg) Packet(number uint16) ([]byte, bool) {
	r, err := l.replica()
	if l.removed.Load() || err != nil {
		return nil, false
	}
	sim, format := l.video()
	seq, ok := r.Original(number, sim != nil)
	enc := r.Sim.Encoding
	if sim == nil {
		enc = 0
	}
	if !ok || enc >= layers.MaxEncodings {
		return nil, false
	}
	p, ok := l.encodingPacket(enc, seq)
	if ok && sim != nil && len(p) >= 12 {
		asReceived(p, sim, format, seq, r.Sim.Shift)
	}
	return p, ok
}

func (l *kernelLeg) waiting() bool {
	var w uint32
	return l.d.objs.ReplicaGates.Lookup(l.slot, &w) == nil && w != 0
}

func (l *kernelLeg) open() { _ = l.d.objs.ReplicaGates.Put(l.slot, uint32(0)) }

func (l *kernelLeg) transportWide() *legTWCC { return l.twccState() }

func (l *kernelLeg) replicated(bytes int, frameEnd bool) { l.out.addFrame(bytes, frameEnd) }

// decide takes the program's claim on the receiver's state (layers_claim)
// and runs the Go reference on it.
func (l *kernelLeg) decide(f *layers.Frame, now uint64) (n uint16, v layers.Verdict, busy bool) {
	target, ok := l.target()
	if !ok {
		return 0, layers.AsIs, false
	}
	busy = !l.withClaim(func(r *layers.Replica) { n, v = r.Decide(f, target, now) })
	return n, v, busy
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

// installStructure installs the templates of a structure a sender's
// video (the encoding in that slot) attached.
func (d *DataPlane) installStructure(slot uint32, desc []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.bySlot[slot]
	if s == nil {
		return
	}
	var e *kernelEncoding
	for i := range s.enc {
		if (i == 0 || s.enc[i].owned) && s.enc[i].slot == slot {
			e = &s.enc[i]
		}
	}
	if e == nil || sameStructure(e.structure, desc) {
		return
	}
	parsed, err := dd.Parse(desc, nil)
	if err != nil || parsed.Structure == nil {
		return
	}
	t := templatesOf(parsed.Structure)
	if d.objs.SenderTemplates.Put(slot, t) == nil {
		e.structure = append(e.structure[:0], desc...)
		s.vmu.Lock()
		e.templates = t
		s.vmu.Unlock()
	}
}
