// Package dataplane loads the SFU's eBPF data plane (bpf/sfu.c) and keeps
// its maps: which streams it replicates, to whom, and what it counted.
// Signaling and the agent decide; this package only installs.
package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/forwarding"
	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/slots"
)

// MaxFanout is how many receivers one stream can have (SFU_MAX_FANOUT).
const MaxFanout = 128

const maxSenders = 16384 // SFU_MAX_SENDERS

// Config of the data plane.
type Config struct {
	// Media are the SFU's media sockets' addresses (at most 8): only
	// datagrams to one of them are the data plane's, as only those would
	// reach the SFU through the kernel.
	Media []netip.AddrPort
	// Conns are the sockets bound to Media. The plane reads what its
	// program hands to the stack: STUN and RTCP feedback go to Upcall, RTP
	// the program could not take whole (fragments, IP options, merged
	// skbs, a source only a loose reverse-path check accepts) is forwarded
	// in user space on the program's own state (forward.go). The SFU's own
	// packets (padding, retransmissions, probes) leave by them. Close
	// closes them. Nil: nothing is read (tests).
	Conns []*net.UDPConn
	// Upcall gets what the agent handles, with the socket it came in on.
	// It must not keep p.
	Upcall func(p []byte, from netip.AddrPort, conn *net.UDPConn)
}

func (c Config) validate() error {
	if len(c.Media) == 0 || len(c.Media) > len(sfuSfuConfig{}.Media) {
		return fmt.Errorf("dataplane: media: want 1 to %d addresses, got %d", len(sfuSfuConfig{}.Media), len(c.Media))
	}
	for _, m := range c.Media {
		if !m.IsValid() || m.Port() == 0 || m.Addr().IsUnspecified() {
			return fmt.Errorf("dataplane: media: %v: want a specific address and port", m)
		}
	}
	return nil
}

// Receiver is where a stream's replicas go: from the SFU's address and
// port (the one this receiver's connection uses) to the receiver's. The
// kernel's routes and neighbours say by which interface and next hop.
type Receiver struct {
	From, To netip.AddrPort
	TTL      uint8 // the IP TTL or hop limit replicas leave with
	// TWCC: the receiver negotiated transport-wide congestion control;
	// its replicas carry its leg's own transport-wide sequence numbers.
	TWCC bool
}

// DataPlane is the loaded program and its maps.
type DataPlane struct {
	cfg     Config
	objs    sfuObjects
	links   []link.Link
	restore func() error // the forwarding sysctls Load changed
	events  *ringbuf.Reader
	readers sync.WaitGroup
	fwd     forwarder
	twcc    *twccMapping // twcc_legs, shared with the program
	adapt   []byte       // replica_adapt, shared with the program
	simEnc  []byte       // simulcast_encodings, shared with the program
	// sendPadding sends a receiver padding in place of a late packet of
	// a layer it does not get (tests watch it).
	sendPadding func(p []byte, from, to netip.AddrPort) error
	slow        [outcomeMax]counter // what the slow path did

	mu        sync.Mutex
	streams   map[netip.AddrPort]*stream
	bySlot    map[uint32]*stream // by any of its encodings' slots
	ids       slots.Pool         // fanout ids and sender_stats slots
	replicaSl slots.Pool
	twccSl    slots.Pool
}

// stream is one sender's transport: its SSRCs share one list of receivers.
type stream struct {
	id       uint32
	sources  []Source
	sim      *Simulcast // its simulcast video, if it has one
	legs     []*kernelLeg
	views    []replicaState // legs, as the slow path takes them
	arrivals uint32         // twcc_legs index + 1 of its arrival log; 0: none

	vmu    sync.Mutex
	enc    [layers.MaxEncodings]kernelEncoding // its video's (one without simulcast); templates under vmu
	in     counter                             // what the slow path took in
	levels levelCounter                        // and the audio levels it heard
}

// kernelEncoding is one encoding of a stream's video (a stream without
// simulcast has one): its slot in the program's per-sender maps (the
// stream's id for the first; its own, taken when it is learnt, for the
// others) and what user space keeps of it.
type kernelEncoding struct {
	slot      uint32
	owned     bool   // slot was taken for it (not the stream's id)
	ssrc      uint32 // a simulcast encoding's, once learnt
	history   bool   // its history entries exist
	structure []byte // the descriptor whose templates are installed
	templates sfuLayerTemplates
	bytes     [layers.MaxTargets]counter // what the slow path counted to each layer
}

// legOf is the stream's leg for a receiver, if it has one: a receiver
// keeps its slot, counters, gate and numbers across SetStream calls.
func (s *stream) legOf(r Receiver) *kernelLeg {
	for _, l := range s.legs {
		if l.From == r.From && l.To == r.To && l.Receiver.TWCC == r.TWCC {
			return l
		}
	}
	return nil
}

// Load loads the program and its maps, and starts reading cfg.Conns; it
// attaches nothing. The program's source checks look routes up from the
// loopback interface, which must forward: Load turns that on in the
// calling thread's network namespace (Close puts it back).
func Load(cfg Config) (*DataPlane, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conns, err := mediaConns(cfg.Conns, nil)
	if err != nil {
		return nil, err
	}
	restore, err := forwarding.Enable("lo")
	if err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	d := &DataPlane{cfg: cfg, streams: map[netip.AddrPort]*stream{}, bySlot: map[uint32]*stream{}, ids: slots.New(maxSenders),
		replicaSl: slots.New(4 * maxSenders), twccSl: slots.New(twccLegs), restore: restore}
	d.fwd = forwarder{conns: conns, count: func(o Outcome, bytes int) { d.slow[o].add(bytes) }}
	d.sendPadding = d.fwd.writeTo
	d.fwd.padding = func(p []byte, from, to netip.AddrPort) error { return d.sendPadding(p, from, to) }
	if err := d.load(); err != nil {
		_ = d.Close()
		return nil, err
	}
	for _, c := range conns {
		d.readers.Add(1)
		go func() {
			defer d.readers.Done()
			serve(c, false, d.handle)
		}()
	}
	return d, nil
}

// load loads the objects, writes the configuration, maps what user space
// shares with the program and starts reading its events.
func (d *DataPlane) load() error {
	if err := loadSfuObjects(&d.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("dataplane: load: %+v", verr)
		}
		return fmt.Errorf("dataplane: load: %w", err)
	}
	var kc sfuSfuConfig
	for i, m := range d.cfg.Media {
		m = addrport.Unmap(m)
		kc.Media[i] = sfuSfuMedia{Port: netorder.Port(m.Port()), Family: afInet}
		if m.Addr().Is4() {
			copy(kc.Media[i].Addr.Bytes[:4], m.Addr().AsSlice())
		} else {
			kc.Media[i].Family, kc.Media[i].Addr.Bytes = afInet6, m.Addr().As16()
		}
	}
	if err := d.objs.Config.Put(uint32(0), kc); err != nil {
		return fmt.Errorf("dataplane: config: %w", err)
	}
	var err error
	if d.twcc, err = mapTWCC(d.objs.TwccLegs.FD()); err != nil {
		return fmt.Errorf("dataplane: twcc_legs: %w", err)
	}
	if d.adapt, err = mapArray(d.objs.ReplicaAdapt, int(unsafe.Sizeof(sfuReplicaLayers{}))); err != nil {
		return fmt.Errorf("dataplane: replica_adapt: %w", err)
	}
	if d.simEnc, err = mapArray(d.objs.SimulcastEncodings, int(unsafe.Sizeof(sfuSimEncodings{}))); err != nil {
		return fmt.Errorf("dataplane: simulcast_encodings: %w", err)
	}
	if d.events, err = ringbuf.NewReader(d.objs.VideoEvents); err != nil {
		return fmt.Errorf("dataplane: video events: %w", err)
	}
	d.readers.Add(1)
	go func() {
		defer d.readers.Done()
		d.readEvents(d.events)
	}()
	return nil
}

// mapArray maps an array map (BPF_F_MMAPABLE) of entries of size bytes.
func mapArray(m *ebpf.Map, size int) ([]byte, error) {
	return unix.Mmap(m.FD(), 0, size*int(m.MaxEntries()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// Program is the TC program, for tests and benchmarks.
func (d *DataPlane) Program() *ebpf.Program { return d.objs.SfuIngress }

// Attach runs the data plane at TC ingress (tcx) of the interface.
func (d *DataPlane) Attach(ifname string) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("dataplane: %w", err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: d.objs.SfuIngress, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("dataplane: attach to %s: %w", ifname, err)
	}
	d.mu.Lock()
	d.links = append(d.links, l)
	d.mu.Unlock()
	return nil
}

// SetStream makes the data plane replicate what the sender at from sends
// with these SSRCs (RTP, and RTCP sender reports) to the receivers, in
// this order. Called again, it replaces SSRCs and receivers at once: a
// packet sees the old list or the new, never a mix. A receiver new to the
// stream gets its video from the sender's next key frame on (audio at
// once); one it already had keeps its counters, numbers and layers.
// Receivers of the other address family than the sender are refused.
func (d *DataPlane) SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error {
	from = addrport.Unmap(from)
	if err := checkStream(from, sources, receivers); err != nil {
		return err
	}
	receivers = unmappedReceivers(receivers)
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.streams[from]; old != nil {
		sources = withLearnt(sources, old.sources)
	}
	return d.setStream(from, sources, receivers)
}

// senderSlot takes a slot for a stream or an encoding, reset: a reused
// slot starts from zero.
func (d *DataPlane) senderSlot() (uint32, error) {
	id, ok := d.ids.Get()
	if !ok {
		return 0, fmt.Errorf("dataplane: more than %d streams and encodings", maxSenders)
	}
	if err := errors.Join(d.objs.SenderStats.Put(id, make([]sfuSfuStats, ebpf.MustPossibleCPU())),
		d.resetSenderLayers(id), d.resetAudioLevels(id)); err != nil {
		d.ids.Put(id)
		return 0, fmt.Errorf("dataplane: sender counters: %w", err)
	}
	return id, nil
}

// setStream is SetStream's, checked, d.mu held.
func (d *DataPlane) setStream(from netip.AddrPort, sources []Source, receivers []Receiver) error {
	s, existed := d.streams[from]
	if !existed {
		id, err := d.senderSlot()
		if err != nil {
			return err
		}
		if err := d.objs.SimulcastEncodings.Put(id, sfuSimEncodings{}); err != nil { // (a stream's, by its id)
			d.ids.Put(id)
			return fmt.Errorf("dataplane: simulcast_encodings: %w", err)
		}
		s = &stream{id: id}
		s.enc[0].slot = id
	}
	// A simulcast description that changes (a publication renegotiated)
	// starts the video and its receivers over.
	changed := existed && simulcastChanged(s.sim, simulcastOf(sources))
	if changed {
		if err := d.resetEncodings(s); err != nil {
			return err
		}
	}
	fan, legs, fresh, err := d.fanout(from, s, receivers, !changed)
	if err == nil {
		if err = d.objs.Fanouts.Put(s.id, fan); err != nil {
			err = fmt.Errorf("dataplane: fanout: %w", err)
		}
	}
	if err != nil {
		d.releaseLegs(fresh)
		if !existed {
			d.ids.Put(s.id)
		}
		return err
	}
	for _, old := range s.legs {
		if !slices.Contains(legs, old) {
			d.releaseLegs([]*kernelLeg{old})
		}
	}
	s.legs, s.views = legs, make([]replicaState, len(legs))
	for i, l := range legs {
		s.views[i] = l
	}
	d.streams[from] = s // from here on, RemoveStream undoes all of it
	d.bySlot[s.id] = s
	if s.arrivals == 0 && slices.ContainsFunc(sources, func(src Source) bool { return src.TWCCExt != 0 }) {
		if i, ok := d.twccSl.Get(); ok { // without one, the sender gets no transport-cc feedback
			d.twcc.leg(i).reset()
			s.arrivals = i + 1
		}
	}
	// New SSRCs first, then drop the ones no longer sent.
	s.sim = simulcastOf(sources)
	for _, src := range sources {
		if src.SSRC == 0 {
			continue // a simulcast video's stand-in: its encodings are learnt (learnEncoding)
		}
		err := d.encodingOf(s, src)
		if err == nil {
			e := &s.enc[encIndex(src)]
			src.History = src.History && e.history
			err = d.putSender(from, src, s, e.slot)
		}
		if err != nil {
			for _, src := range sources {
				if !hasSSRC(s.sources, src.SSRC) {
					s.sources = append(s.sources, src) // for RemoveStream to delete
				}
			}
			return err
		}
	}
	for _, old := range s.sources {
		if !hasSSRC(sources, old.SSRC) {
			_ = d.deleteSender(from, old.SSRC)
		}
	}
	s.sources = append([]Source(nil), sources...)
	return nil
}

// StreamStats is what the sender at from sent into the data plane, and
// what went out to each receiver.
func (d *DataPlane) StreamStats(from netip.AddrPort) (StreamStats, error) {
	from = addrport.Unmap(from)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[from]
	if !ok {
		return StreamStats{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	st := StreamStats{In: s.in.load(), Out: make([]ReceiverStats, len(s.legs))}
	for i := range s.enc {
		if e := &s.enc[i]; i == 0 || e.owned {
			in, err := sumStats(d.objs.SenderStats, e.slot)
			if err != nil {
				return StreamStats{}, err
			}
			st.In = st.In.Add(in)
		}
	}
	video := hasVideo(s.sources)
	for i, l := range s.legs {
		var waiting uint32
		if err := d.objs.ReplicaGates.Lookup(l.slot, &waiting); err != nil {
			return StreamStats{}, err
		}
		st.Out[i] = ReceiverStats{To: l.To, Waiting: video && waiting != 0}
		c, err := sumStats(d.objs.ReplicaStats, l.slot)
		if err != nil {
			return StreamStats{}, err
		}
		st.Out[i].Counter = c.Add(l.out.load())
	}
	return st, nil
}

// RemoveStream stops replicating the sender at from; its map entries go.
func (d *DataPlane) RemoveStream(from netip.AddrPort) error {
	from = addrport.Unmap(from)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[from]
	if !ok {
		return fmt.Errorf("dataplane: no stream from %v", from)
	}
	var errs []error
	for _, src := range s.sources {
		if src.SSRC != 0 {
			errs = append(errs, d.deleteSender(from, src.SSRC))
		}
	}
	errs = append(errs, d.objs.Fanouts.Delete(s.id))
	d.releaseEncodings(s)
	if s.arrivals != 0 {
		d.twccSl.Put(s.arrivals - 1)
	}
	d.releaseLegs(s.legs)
	d.ids.Put(s.id)
	delete(d.streams, from)
	return errors.Join(errs...)
}

// fanout lays the receivers out for the kernel: receivers the stream had
// keep their legs if keep, new ones get fresh legs (zeroed counters, no cached
// path, waiting for a key frame, transport-wide numbers from zero),
// returned as fresh.
func (d *DataPlane) fanout(from netip.AddrPort, s *stream, receivers []Receiver, keep bool) (fan sfuFanout, used, fresh []*kernelLeg, err error) {
	for i, r := range receivers {
		rep, err := replicaOf(from, r)
		if err != nil {
			d.releaseLegs(fresh)
			return fan, nil, nil, fmt.Errorf("dataplane: receiver %d: %w", i, err)
		}
		var l *kernelLeg
		if keep {
			l = s.legOf(r)
		}
		if l == nil {
			if l, err = d.newLeg(r); err != nil {
				d.releaseLegs(fresh)
				return fan, nil, nil, err
			}
			l.sender, l.stream = from, s // (written once)
			fresh = append(fresh, l)
		}
		l.TTL = r.TTL
		rep.Slot, rep.Twcc = l.slot, l.twcc
		used = append(used, l)
		fan.R[i] = rep
	}
	fan.Count = uint32(len(receivers))
	return fan, used, fresh, nil
}

// newLeg takes a slot (and transport-wide numbers, if r has them) and
// resets what a previous receiver left in them.
func (d *DataPlane) newLeg(r Receiver) (*kernelLeg, error) {
	slot, ok := d.replicaSl.Get()
	if !ok {
		return nil, errors.New("dataplane: out of receiver counters")
	}
	l := &kernelLeg{Receiver: r, d: d, slot: slot}
	err := errors.Join(d.objs.ReplicaStats.Put(slot, make([]sfuSfuStats, ebpf.MustPossibleCPU())),
		d.objs.ReplicaPaths.Put(slot, make([]sfuReplicaPath, ebpf.MustPossibleCPU())),
		d.objs.ReplicaGates.Put(slot, uint32(1)), d.resetReplicaLayers(slot))
	if err != nil {
		d.replicaSl.Put(slot)
		return nil, fmt.Errorf("dataplane: receiver slot: %w", err)
	}
	if r.TWCC {
		i, ok := d.twccSl.Get()
		if !ok {
			d.replicaSl.Put(slot)
			return nil, fmt.Errorf("dataplane: more than %d receivers with transport-wide numbers", twccLegs)
		}
		d.twcc.leg(i).reset()
		l.twcc = i + 1
	}
	return l, nil
}

// releaseLegs gives the legs' slots back; their handles go stale.
func (d *DataPlane) releaseLegs(legs []*kernelLeg) {
	for _, l := range legs {
		l.removed.Store(true)
		d.replicaSl.Put(l.slot)
		if l.twcc != 0 {
			d.twccSl.Put(l.twcc - 1)
		}
	}
}

// checkStream is what both data planes ask of a stream: an SSRC, at most
// MaxFanout receivers, all of the sender's address family.
func checkStream(from netip.AddrPort, sources []Source, receivers []Receiver) error {
	if len(sources) == 0 {
		return errors.New("dataplane: a stream needs an SSRC")
	}
	videos := 0
	var sim *Simulcast
	for _, src := range sources {
		if int(src.Video) >= len(codecNames) {
			return fmt.Errorf("dataplane: SSRC %d: unknown %v", src.SSRC, src.Video)
		}
		if err := checkSimulcast(src, &sim); err != nil {
			return err
		}
		if src.Video != NoVideo && src.Simulcast == nil {
			videos++
		}
	}
	// A receiver's key-frame gate is one per stream: a second video SSRC's
	// key frame would let the first's deltas in mid-picture. (A simulcast
	// receiver takes one encoding at a time, DecideEncoding.)
	if videos > 1 || (videos > 0 && sim != nil) {
		return fmt.Errorf("dataplane: %d video SSRCs; one per stream, or one simulcast video (RTX as NoVideo)", videos)
	}
	if len(receivers) > MaxFanout {
		return fmt.Errorf("dataplane: %d receivers, at most %d", len(receivers), MaxFanout)
	}
	seen := map[Receiver]bool{}
	for i, r := range receivers {
		key := Receiver{From: addrport.Unmap(r.From), To: addrport.Unmap(r.To)}
		if seen[key] {
			return fmt.Errorf("dataplane: receiver %d: %v -> %v listed twice", i, r.From, r.To)
		}
		seen[key] = true
		if r.From.Addr().Unmap().Is4() != from.Addr().Is4() || r.To.Addr().Unmap().Is4() != from.Addr().Is4() {
			return fmt.Errorf("dataplane: receiver %d: %v -> %v: not the family of the sender %v", i, r.From, r.To, from)
		}
	}
	return nil
}

// checkSimulcast checks a source of a simulcast video: all of a stream's
// share one Simulcast (*sim, the first seen).
func checkSimulcast(src Source, sim **Simulcast) error {
	switch {
	case src.Simulcast == nil:
		return nil
	case src.Video == NoVideo:
		return fmt.Errorf("dataplane: SSRC %d: simulcast audio", src.SSRC)
	case *sim != nil && *sim != src.Simulcast:
		return errors.New("dataplane: two simulcast videos in one stream")
	case len(src.Simulcast.RIDs) == 0 || len(src.Simulcast.RIDs) > layers.MaxEncodings || src.Simulcast.RIDExt == 0:
		return fmt.Errorf("dataplane: simulcast of %d encodings (1 to %d) with stream id extension %d",
			len(src.Simulcast.RIDs), layers.MaxEncodings, src.Simulcast.RIDExt)
	case int(src.Encoding) >= len(src.Simulcast.RIDs):
		return fmt.Errorf("dataplane: SSRC %d: encoding %d of %d", src.SSRC, src.Encoding, len(src.Simulcast.RIDs))
	}
	*sim = src.Simulcast
	return nil
}

func unmappedReceivers(rs []Receiver) []Receiver {
	out := make([]Receiver, len(rs))
	for i, r := range rs {
		out[i] = Receiver{From: addrport.Unmap(r.From), To: addrport.Unmap(r.To), TTL: r.TTL, TWCC: r.TWCC}
	}
	return out
}

func replicaOf(from netip.AddrPort, r Receiver) (sfuReplica, error) {
	src, dst := r.From.Addr().Unmap(), r.To.Addr().Unmap()
	if r.TTL == 0 {
		return sfuReplica{}, fmt.Errorf("%v: needs a TTL", r.To)
	}
	rep := sfuReplica{Sport: netorder.Port(r.From.Port()), Dport: netorder.Port(r.To.Port()), Ttl: r.TTL, Family: afInet}
	if src.Is4() {
		copy(rep.Saddr.Bytes[:4], src.AsSlice())
		copy(rep.Daddr.Bytes[:4], dst.AsSlice())
	} else {
		rep.Family = afInet6
		rep.Saddr.Bytes, rep.Daddr.Bytes = src.As16(), dst.As16()
	}
	return rep, nil
}

func (d *DataPlane) putSender(from netip.AddrPort, src Source, s *stream, slot uint32) error {
	v := sfuSender{Id: s.id, Slot: slot, Video: uint8(src.Video), DdExt: src.DDExt, TwccExt: src.TWCCExt, Arrivals: s.arrivals,
		LevelExt: src.LevelExt, Encoding: encIndex(src)}
	if src.History {
		v.History = 1
	}
	if src.Simulcast != nil {
		v.SimSsrc = netorder.Word(src.Simulcast.SSRC)
	}
	ssrc := src.SSRC
	var err error
	if from.Addr().Is4() {
		err = d.objs.SendersV4.Put(sfuSenderKeyV4{Addr: netorder.IPv4(from.Addr()), Ssrc: netorder.Word(ssrc), Port: netorder.Port(from.Port())}, v)
	} else {
		err = d.objs.SendersV6.Put(sfuSenderKeyV6{Addr: from.Addr().As16(), Ssrc: netorder.Word(ssrc), Port: netorder.Port(from.Port())}, v)
	}
	if err != nil {
		return fmt.Errorf("dataplane: sender: %w", err)
	}
	return nil
}

func (d *DataPlane) deleteSender(from netip.AddrPort, ssrc uint32) error {
	if from.Addr().Is4() {
		return d.objs.SendersV4.Delete(sfuSenderKeyV4{Addr: netorder.IPv4(from.Addr()), Ssrc: netorder.Word(ssrc), Port: netorder.Port(from.Port())})
	}
	return d.objs.SendersV6.Delete(sfuSenderKeyV6{Addr: from.Addr().As16(), Ssrc: netorder.Word(ssrc), Port: netorder.Port(from.Port())})
}

// Close stops reading the sockets (and closes them), detaches and
// unloads everything.
func (d *DataPlane) Close() error {
	errs := closeConns(d.fwd.conns)
	if d.events != nil {
		errs = append(errs, d.events.Close())
	}
	d.readers.Wait()
	d.events = nil
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.links {
		errs = append(errs, l.Close())
	}
	d.links = nil
	if d.twcc != nil {
		errs = append(errs, d.twcc.close())
		d.twcc = nil
	}
	for _, m := range []*[]byte{&d.adapt, &d.simEnc} {
		if *m != nil {
			errs = append(errs, unix.Munmap(*m))
			*m = nil
		}
	}
	errs = append(errs, d.objs.Close())
	if d.restore != nil {
		errs = append(errs, d.restore())
		d.restore = nil
	}
	return errors.Join(errs...)
}

const (
	afInet  = 2
	afInet6 = 10
)

func hasSSRC(sources []Source, ssrc uint32) bool {
	return slices.ContainsFunc(sources, func(s Source) bool { return s.SSRC == ssrc })
}

func hasVideo(sources []Source) bool {
	return slices.ContainsFunc(sources, func(s Source) bool { return s.Video != NoVideo })
}
