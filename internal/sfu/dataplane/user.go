package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/sockopt"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// Plane is what the SFU asks of a data plane, in the kernel or not.
type Plane interface {
	// SetStream makes the plane replicate what the sender at from sends
	// with these SSRCs to the receivers (see DataPlane.SetStream).
	SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error
	RemoveStream(from netip.AddrPort) error
	StreamStats(from netip.AddrPort) (StreamStats, error)
	Outcomes() (map[Outcome]Counter, error)
	// Layers is the stream's decode targets and their bytes.
	Layers(from netip.AddrPort) (Layers, error)
	// Packet is a copy of the sender's packet seq from its history (a
	// source with History), if it is there.
	Packet(from netip.AddrPort, seq uint16) ([]byte, bool)
	// Leg is the plane's side of the receiver at to of the sender at from.
	Leg(from, to netip.AddrPort) (Leg, error)
	// Arrivals is the log of when the sender's transport-wide numbers
	// arrived (a source with TWCCExt).
	Arrivals(from netip.AddrPort) (*ArrivalLog, error)
	// AudioLevels is what the stream's audio levels added up to (a
	// source with LevelExt).
	AudioLevels(from netip.AddrPort) (AudioLevels, error)
	// Send sends a datagram of the SFU's own (RTCP to a sender) from its
	// media socket at from.
	Send(p []byte, from, to netip.AddrPort) error
	Close() error
}

var (
	_ Plane = (*DataPlane)(nil)
	_ Plane = (*User)(nil)
)

// UserConfig configures the user-space data plane.
type UserConfig struct {
	// Conns are the SFU's media sockets, one per local address and port;
	// a receiver's From names the one its replicas leave by.
	Conns []*net.UDPConn
	// Upcall gets what the agent handles (STUN, RTCP feedback), with the
	// socket it came in on. It must not keep p.
	Upcall func(p []byte, from netip.AddrPort, conn *net.UDPConn)
	// Readers, where set, receive for a conn in its place (an AF_XDP conn
	// whose kernel socket it is: --rx afxdp); replicas still leave by
	// the conn. Close closes them.
	Readers map[*net.UDPConn]DatagramConn
	// Encrypted: media is SRTP, keyed per connection (Protect): opened
	// once as it arrives, sealed per receiver; DTLS goes to Upcall too.
	Encrypted bool
	// Workers, where set, are more sockets in a conn's SO_REUSEPORT
	// group, each read by a goroutine of its own. The kernel spreads the
	// group's datagrams by their addresses, so a sender's stay on one
	// worker, in order, and senders are forwarded on as many cores.
	// Replicas and upcalls still go by the conn. Close closes them.
	Workers map[*net.UDPConn][]*net.UDPConn
}

// DatagramConn receives and sends datagrams a batch at a time (an AF_XDP
// conn: its TX ring where the kernel would send the same frames).
type DatagramConn interface {
	ReadBatch(ms []afxdp.Message) (int, error)
	WriteBatch(ms []afxdp.Message) (int, error)
	Close() error
}

// User is the data plane in user space (--dataplane user): the decisions
// of the eBPF one, taken on datagrams read from the media sockets in
// batches (recvmmsg) and replicated with sendmmsg (forward.go). It is the
// fair baseline for the eBPF data plane and the fallback where TC BPF is
// unavailable.
type User struct {
	cfg UserConfig
	fwd forwarder

	mu      sync.RWMutex
	senders map[userKey]*userStream
	streams map[netip.AddrPort]*userStream

	early   earlyArrivals // datagrams before their address's keys or stream (early.go)
	counts  [outcomeMax]counter
	readers []*mediaConn // each read by a goroutine: the conns, each followed by its workers
	wg      sync.WaitGroup
}

// ListenGroup binds n UDP sockets to addr, one SO_REUSEPORT group when
// n > 1 (the first a conn of UserConfig.Conns, the others its Workers):
// the kernel hands each remote address's datagrams to one of them.
//
// A group is the SFU's alone: before it binds, a socket without
// SO_REUSEPORT checks that nobody holds the address (another SFU's group
// would otherwise take in this one's sockets and a share of its senders).
func ListenGroup(addr netip.AddrPort, n int) ([]*net.UDPConn, error) {
	if n < 1 {
		return nil, fmt.Errorf("dataplane: a group of %d sockets", n)
	}
	var lc net.ListenConfig
	if n > 1 {
		if addr.Port() != 0 {
			probe, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
			if err != nil {
				return nil, err
			}
			probe.Close()
		}
		lc.Control = sockopt.ReusePort
	}
	group := make([]*net.UDPConn, 0, n)
	for range n {
		if len(group) == 1 { // the others on the port the first got
			addr = netip.AddrPortFrom(addr.Addr(), group[0].LocalAddr().(*net.UDPAddr).AddrPort().Port())
		}
		pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
		if err != nil {
			for _, c := range group {
				c.Close()
			}
			return nil, err
		}
		group = append(group, pc.(*net.UDPConn))
	}
	return group, nil
}

// WorkerReads is how many datagrams each reading goroutine took: the
// conns in UserConfig order, each followed by its workers.
func (u *User) WorkerReads() []uint64 {
	n := make([]uint64, len(u.readers))
	for i, c := range u.readers {
		n[i] = c.read.Load()
	}
	return n
}

type userKey struct {
	from netip.AddrPort
	ssrc uint32
}

type userStream struct {
	sources   []Source
	receivers []*userReceiver
	views     []replicaState // receivers, as forwarding takes them
	in        *counter
	video     *userVideo // shared by the stream's versions (SetStream)
}

// userVideo is a stream's video state: each encoding's (one without
// simulcast), its transport-wide arrivals and its audio's levels (the
// stream's, kept with its video's state across versions).
type userVideo struct {
	mu       sync.Mutex                     // the encodings' structures and templates
	format   atomic.Pointer[encodingFormat] // what its simulcast packets are rewritten in (a codec renegotiated: anew)
	enc      [layers.MaxEncodings]userEncoding
	arrivals legTWCC
	levels   levelCounter
}

type userReceiver struct {
	Receiver
	video   *userVideo // its stream's
	sim     *Simulcast // its stream's simulcast video, if it has one
	out     counter
	waited  atomic.Bool   // for a key frame (video only)
	target  atomic.Uint32 // layers.AllTargets, layers.NoVideo, or a decode target
	tw      *legTWCC      // nil: no transport-wide numbers
	removed atomic.Bool
	asked   atomic.Int32 // a simulcast receiver's target as SetTarget had it (flat)

	mu    sync.Mutex
	adapt layers.Replica
}

// receiver is the stream's entry for r, if it has one.
func (s *userStream) receiver(r Receiver) *userReceiver {
	for _, have := range s.receivers {
		if have.From == r.From && have.To == r.To {
			return have
		}
	}
	return nil
}

type counter struct{ packets, bytes, frames atomic.Uint64 }

func (c *counter) add(bytes int) {
	c.packets.Add(1)
	c.bytes.Add(uint64(bytes))
}

func (c *counter) addFrame(bytes int, frameEnd bool) {
	c.add(bytes)
	if frameEnd {
		c.frames.Add(1)
	}
}

func (c *counter) load() Counter {
	return Counter{Packets: c.packets.Load(), Bytes: c.bytes.Load(), Frames: c.frames.Load()}
}

// userBatch is how many datagrams one recvmmsg takes; maxDatagram the
// largest UDP payload (a datagram cut short would be lost).
const (
	userBatch   = 32
	maxDatagram = 65535
)

// NewUser starts reading the media sockets; Close stops it (and closes them).
func NewUser(cfg UserConfig) (*User, error) {
	if len(cfg.Conns) == 0 {
		return nil, errors.New("dataplane: user: no media sockets")
	}
	u := &User{cfg: cfg, senders: map[userKey]*userStream{}, streams: map[netip.AddrPort]*userStream{}}
	conns, err := mediaConns(cfg.Conns, cfg.Readers)
	if err != nil {
		return nil, err
	}
	u.fwd = forwarder{conns: conns, count: u.count}
	if cfg.Encrypted {
		u.fwd.keys = newProtections()
	}
	for _, kc := range cfg.Conns { // in order: WorkerReads
		c := conns[addrport.Unmap(kc.LocalAddr().(*net.UDPAddr).AddrPort())]
		if c.reader != nil && len(cfg.Workers[kc]) > 0 {
			return nil, errors.New("dataplane: workers for a conn with a reader of its own (AF_XDP reads its queues itself)")
		}
		u.readers = append(u.readers, c)
		for _, w := range cfg.Workers[kc] {
			// Reads w; what it reads goes on as the conn's.
			u.readers = append(u.readers, &mediaConn{conn: c.conn, batch: ipv4.NewPacketConn(w)})
		}
	}
	for _, c := range u.readers {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			serve(c, cfg.Encrypted, u.handle)
		}()
	}
	return u, nil
}

// mediaConns are the sockets by local address, which must be specific.
func mediaConns(cs []*net.UDPConn, readers map[*net.UDPConn]DatagramConn) (map[netip.AddrPort]*mediaConn, error) {
	out := map[netip.AddrPort]*mediaConn{}
	for _, c := range cs {
		local := addrport.Unmap(c.LocalAddr().(*net.UDPAddr).AddrPort())
		if local.Addr().IsUnspecified() {
			return nil, fmt.Errorf("dataplane: socket %v: bind a specific address (replicas leave from it)", local)
		}
		if out[local] != nil {
			return nil, fmt.Errorf("dataplane: two sockets of %v (one per address)", local)
		}
		out[local] = newMediaConn(c, readers[c])
	}
	return out, nil
}

// SetStream is DataPlane.SetStream's: receivers' From must be one of the
// sockets' addresses; interfaces, MACs and TTL are the kernel's business.
func (u *User) SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error {
	from = addrport.Unmap(from)
	if err := checkStream(from, sources, receivers); err != nil {
		return err
	}
	receivers = unmappedReceivers(receivers)
	for i, r := range receivers {
		if _, ok := u.fwd.conns[r.From]; !ok {
			return fmt.Errorf("dataplane: receiver %d: no media socket at %v", i, r.From)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if old := u.streams[from]; old != nil {
		sources = withLearnt(sources, old.sources)
	}
	u.setStream(from, sources, receivers)
	return nil
}

// setStream is SetStream's, checked, u.mu held.
func (u *User) setStream(from netip.AddrPort, sources []Source, receivers []Receiver) {
	old := u.streams[from]
	s := &userStream{sources: append([]Source(nil), sources...), in: &counter{}, video: &userVideo{}}
	if old != nil {
		s.in, s.video = old.in, old.video
		for _, src := range old.sources {
			delete(u.senders, userKey{from, src.SSRC})
		}
	}
	sim, format := simulcastOf(sources), formatOf(sources)
	s.video.format.Store(&format)
	for _, src := range sources {
		if src.Simulcast != nil && src.SSRC != 0 {
			e := &s.video.enc[src.Encoding]
			e.ssrc.Store(src.SSRC)
		}
	}
	for _, r := range receivers {
		var have *userReceiver
		if old != nil {
			have = old.receiver(r)
		}
		if have == nil || have.Receiver != r || simulcastChanged(have.sim, sim) { // (read while forwarding, unlocked)
			have = newUserReceiver(r, s.video, sim)
		}
		s.receivers = append(s.receivers, have)
		s.views = append(s.views, have)
	}
	if old != nil {
		for _, r := range old.receivers {
			if s.receiver(r.Receiver) != r {
				r.removed.Store(true)
			}
		}
	}
	for _, src := range sources {
		if src.SSRC != 0 {
			u.senders[userKey{from, src.SSRC}] = s
		}
	}
	u.streams[from] = s
}

func newUserReceiver(r Receiver, video *userVideo, sim *Simulcast) *userReceiver {
	have := &userReceiver{Receiver: r, video: video, sim: sim, adapt: layers.NewReplica()}
	have.asked.Store(EveryLayer)
	have.waited.Store(true)
	have.target.Store(layers.AllTargets)
	if r.TWCC {
		have.tw = &legTWCC{}
	}
	return have
}

// RemoveStream stops replicating the sender at from.
func (u *User) RemoveStream(from netip.AddrPort) error {
	from = addrport.Unmap(from)
	u.mu.Lock()
	defer u.mu.Unlock()
	s, ok := u.streams[from]
	if !ok {
		return fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, src := range s.sources {
		delete(u.senders, userKey{from, src.SSRC})
	}
	for _, r := range s.receivers {
		r.removed.Store(true)
	}
	delete(u.streams, from)
	return nil
}

// Outcomes are the counters, as the eBPF data plane keeps them.
func (u *User) Outcomes() (map[Outcome]Counter, error) {
	u.countExpired(u.early.expire(monoNow())) // (held ones are counted when they are judged)
	out := map[Outcome]Counter{}
	for o := range outcomeMax {
		out[o] = u.counts[o].load()
	}
	return out, nil
}

// StreamStats is DataPlane.StreamStats.
func (u *User) StreamStats(from netip.AddrPort) (StreamStats, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[addrport.Unmap(from)]
	if !ok {
		return StreamStats{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	st := StreamStats{In: s.in.load(), Out: make([]ReceiverStats, len(s.receivers))}
	video := hasVideo(s.sources)
	for i, r := range s.receivers {
		st.Out[i] = ReceiverStats{To: r.To, Counter: r.out.load(), Waiting: video && r.waited.Load()}
	}
	return st, nil
}

// Close closes the sockets and waits for the readers.
func (u *User) Close() error {
	errs := closeConns(u.fwd.conns)
	for _, ws := range u.cfg.Workers {
		for _, w := range ws {
			errs = append(errs, w.Close())
		}
	}
	u.wg.Wait()
	return errors.Join(errs...)
}

func closeConns(conns map[netip.AddrPort]*mediaConn) []error {
	var errs []error
	for _, c := range conns {
		if c.reader != nil {
			errs = append(errs, c.reader.Close()) // and its kernel socket, c.conn
			continue
		}
		errs = append(errs, c.conn.Close())
	}
	return errs
}

func (u *User) count(o Outcome, bytes int) { u.counts[o].add(bytes) }

// serve reads a socket until it is closed, in batches (recvmmsg, or its
// reader's ReadBatch), handing each datagram to handle with a scratch batch.
func serve(c *mediaConn, encrypted bool, handle func(c *mediaConn, p []byte, from netip.AddrPort, b *replicaBatch)) {
	b := newReplicaBatch(encrypted)
	if c.reader != nil {
		ms := make([]afxdp.Message, userBatch)
		for i := range ms {
			ms[i].Buf = make([]byte, maxDatagram)
		}
		for {
			n, err := c.reader.ReadBatch(ms)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			c.read.Add(uint64(n))
			for _, m := range ms[:n] {
				handle(c, m.Buf[:m.N], addrport.Unmap(m.Addr), b)
			}
		}
	}
	msgs := make([]ipv4.Message, userBatch)
	for i := range msgs {
		msgs[i].Buffers, msgs[i].OOB = [][]byte{make([]byte, maxDatagram)}, make([]byte, rxTimeOOB)
	}
	stamped := enableRxTimes(c.conn) == nil
	for {
		n, err := c.batch.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.read.Add(uint64(n))
		offset, now := clockOffset()
		for _, m := range msgs[:n] {
			if b.rxAt = 0; stamped {
				b.rxAt = rxTime(m.OOB[:m.NN], offset, now)
			}
			handle(c, m.Buffers[0][:m.N], addrport.Unmap(m.Addr.(*net.UDPAddr).AddrPort()), b)
		}
		b.rxAt = 0
	}
}

// handle judges one datagram and replicates it where the eBPF data plane would.
func (u *User) handle(c *mediaConn, p []byte, from netip.AddrPort, b *replicaBatch) {
	if u.early.pending() && u.hasStream(from) {
		// (By the worker that reads from's datagrams: its state keeps one
		// writer.)
		for _, d := range u.early.take(from) {
			u.handleEarly(from, d)
		}
	}
	if u.fwd.keys != nil {
		pr := u.fwd.keys.of(from)
		if pr == nil && isRTPOrRTCP(p) && !u.hasStream(from) { // (keys and stream to come)
			u.holdEarly(from, earlyDatagram{c: c, p: p, rxAt: b.rxAt, why: Unprotected})
			return
		}
		var ok bool
		if p, ok = u.open(c, p, from, pr, b); !ok {
			return
		}
	}
	u.handleOpen(c, p, from, b)
}

func (u *User) hasStream(from netip.AddrPort) bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.streams[from] != nil
}

// holdEarly keeps d (early.go), or counts it if it is not kept. A held
// datagram is counted when it is handled, or dropped unhandled.
func (u *User) holdEarly(from netip.AddrPort, d earlyDatagram) {
	kept, expired := u.early.hold(from, d, monoNow())
	if !kept {
		u.count(d.why, len(d.p))
	}
	u.countExpired(expired)
}

func (u *User) countExpired(expired []earlyDatagram) {
	for _, x := range expired {
		u.count(x.why, len(x.p))
	}
}

// handleEarly handles a datagram held until its stream was installed.
func (u *User) handleEarly(from netip.AddrPort, d earlyDatagram) {
	b := newReplicaBatch(u.fwd.keys != nil)
	b.rxAt = d.rxAt
	if d.opened {
		b.overhead = d.overhead
		u.handleOpen(d.c, d.p, from, b)
		return
	}
	u.handle(d.c, d.p, from, b)
}

// handleOpen is handle's for an opened datagram (plain RTP or RTCP).
func (u *User) handleOpen(c *mediaConn, p []byte, from netip.AddrPort, b *replicaBatch) {
	cl := Classify(p)
	if !cl.Replicate {
		u.count(cl.Outcome, len(p))
		if (cl.Outcome == Stun || cl.Outcome == RTCPToAgent) && u.cfg.Upcall != nil {
			u.cfg.Upcall(p, from, c.conn)
		}
		return
	}
	u.mu.RLock()
	s := u.senders[userKey{from, cl.SSRC}]
	u.mu.RUnlock()
	if s == nil && cl.Payload != nil {
		s = u.learnEncoding(from, cl.SSRC, p, len(p)-len(cl.Payload))
	}
	if s == nil {
		var ok bool
		if s, p, cl, ok = u.undescribed(c, p, cl, from, b); !ok {
			return
		}
	}
	u.fwd.forward(s, p, cl, b)
}

// undescribed takes a packet from `from` on an SSRC none of its sources
// is: held until its stream comes (encrypted media, early.go), turned into
// the packet it repairs (rtx.go), or counted, its transport-wide number
// logged (a probe's, say).
func (u *User) undescribed(c *mediaConn, p []byte, cl Classified, from netip.AddrPort, b *replicaBatch) (*userStream, []byte, Classified, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	st := u.streams[from]
	switch {
	case st == nil && u.fwd.keys != nil: // (keys, but the stream is not installed yet)
		u.holdEarly(from, earlyDatagram{c: c, p: p, opened: true, overhead: b.overhead, rxAt: b.rxAt, why: UnknownSender})
		return nil, nil, cl, false
	case st == nil:
		u.count(UnknownSender, len(p))
		return nil, nil, cl, false
	}
	q, qcl, why := repairedPacket(st.sources, p, cl, b.repaired)
	if why == Replicated {
		if s := u.senders[userKey{from, qcl.SSRC}]; s != nil {
			return s, q, qcl, true
		}
	}
	arrivedUnknown(st.sources, p, cl, len(p)+b.overhead, b.rxAt, st.arrived)
	u.count(why, len(p))
	return nil, nil, cl, false
}

// The user plane's state, as forwarding takes it.

func (s *userStream) source(ssrc uint32) (Source, bool) {
	for _, src := range s.sources {
		if src.SSRC == ssrc && ssrc != 0 { // (0: a simulcast video's stand-in, no SSRC; libwebrtc's first probes)
			return src, true
		}
	}
	return Source{}, false
}

func (s *userStream) replicas() []replicaState { return s.views }

func (s *userStream) arrived(seq uint16, size int, at time.Duration) {
	s.video.arrivals.arrived(seq, size, at)
}

func (s *userStream) heard(level uint8, voiced bool) { s.video.levels.add(level, voiced) }

func (s *userStream) received(bytes int, frameEnd bool) { s.in.addFrame(bytes, frameEnd) }

func (s *userStream) seenOrKeep(src Source, seq uint16, ts uint32, p []byte) bool {
	return s.video.enc[src.Encoding].history.seenOrKeep(seq, ts, p, monoNow())
}

func (s *userStream) frame(p []byte, hdr int, src Source, size int) layers.Frame {
	v := s.video
	v.mu.Lock()
	defer v.mu.Unlock()
	e := &v.enc[src.Encoding]
	f, layer, structure := frameOf(p, hdr, src.DDExt, &e.templates)
	if structure != nil && !sameStructure(structure, e.structure) {
		if d, err := dd.Parse(structure, nil); err == nil && d.Structure != nil {
			e.templates, e.structure = templatesOf(d.Structure), append(e.structure[:0], structure...)
		}
	}
	if layer >= 0 {
		e.bytes[layer].add(size)
	}
	return f
}

// encodingSent notes a packet of a simulcast encoding (size bytes on the
// wire) at now. Media without a dependency descriptor counts whole, and
// makes its encoding one of a single target; media with one makes it one
// of its structure's targets; padding (a probe) does neither, nor keeps it
// live.
func (s *userStream) encodingSent(src Source, size int, desc described, now uint64) uint8 {
	e := &s.video.enc[src.Encoding]
	switch desc {
	case undescribed:
		e.noDD.Store(true)
		e.bytes[0].add(size)
		e.lastAt.Store(now)
	case withDescriptor:
		e.noDD.Store(false)
		e.lastAt.Store(now)
	}
	return s.video.top(now)
}

func (r *userReceiver) receiver() Receiver      { return r.Receiver }
func (r *userReceiver) waiting() bool           { return r.waited.Load() }
func (r *userReceiver) open()                   { r.waited.Store(false) }
func (r *userReceiver) transportWide() *legTWCC { return r.tw }

func (r *userReceiver) replicated(bytes int, frameEnd bool) { r.out.addFrame(bytes, frameEnd) }

func (r *userReceiver) decideEncoding(f *layers.Frame, enc uint8, ts uint32, top uint8, now uint64) (layers.Numbers, layers.Verdict, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, v := r.adapt.DecideEncoding(f, enc, ts, uint8(r.target.Load()), top, now)
	return n, v, false
}

func (r *userReceiver) encodingInForce() (uint8, layers.Numbers) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.adapt.Sim.Encoding, r.adapt.Sim.Shift
}

func (r *userReceiver) decide(f *layers.Frame, now uint64) (uint16, layers.Verdict, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, v := r.adapt.Decide(f, uint8(r.target.Load()), now)
	return n, v, false
}

// Arrivals is Plane.Arrivals.
func (u *User) Arrivals(from netip.AddrPort) (*ArrivalLog, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[addrport.Unmap(from)]
	if !ok {
		return nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	return &ArrivalLog{log: &s.video.arrivals}, nil
}

// Send is Plane.Send.
func (u *User) Send(p []byte, from, to netip.AddrPort) error {
	return u.fwd.writeTo(p, addrport.Unmap(from), addrport.Unmap(to))
}

// Packet is Plane.Packet.
func (u *User) Packet(from netip.AddrPort, seq uint16) ([]byte, bool) {
	u.mu.RLock()
	s, ok := u.streams[addrport.Unmap(from)]
	u.mu.RUnlock()
	if !ok {
		return nil, false
	}
	p, _, ok := s.video.enc[0].history.packet(seq)
	return p, ok
}

// Layers is DataPlane.Layers.
func (u *User) Layers(from netip.AddrPort) (Layers, error) {
	s, err := u.streamFrom(from)
	if err != nil {
		return Layers{}, err
	}
	v := s.video
	if simulcastOf(s.sources) != nil {
		return v.views().layers(coarseNow()), nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := &v.enc[0]
	var perLayer [layers.MaxTargets]uint64
	for l := range perLayer {
		perLayer[l] = e.bytes[l].load().Bytes
	}
	return Layers{Targets: int(e.templates.Targets), Bytes: cumulative(perLayer[:], int(e.templates.Targets))}, nil
}

// Leg is Plane.Leg.
func (u *User) Leg(from, to netip.AddrPort) (Leg, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[addrport.Unmap(from)]
	if !ok {
		return nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, r := range s.receivers {
		if r.To == addrport.Unmap(to) {
			return &userLeg{u: u, r: r}, nil
		}
	}
	return nil, fmt.Errorf("dataplane: %v does not receive %v", to, from)
}

// userLeg is a User receiver's Leg.
type userLeg struct {
	u *User
	r *userReceiver
}

var errLegGone = errors.New("dataplane: the leg is gone")

func (l *userLeg) SetTarget(target int) error {
	if l.r.removed.Load() {
		return errLegGone
	}
	v := targetValue(target)
	if l.r.sim != nil && target >= 0 {
		v = l.r.video.views().target(target, coarseNow())
	}
	l.r.target.Store(v)
	l.r.asked.Store(int32(target))
	return nil
}

func (l *userLeg) State() (ReceiverLayers, error) {
	if l.r.removed.Load() {
		return ReceiverLayers{}, errLegGone
	}
	l.r.mu.Lock()
	a := l.r.adapt
	l.r.mu.Unlock()
	now := coarseNow()
	st := ReceiverLayers{Target: targetOf(uint8(l.r.target.Load())), Current: targetOf(a.Current), SwitchWaiting: waited(a.SwitchWait, now)}
	if l.r.sim != nil {
		st = l.r.video.views().state(st, int(l.r.asked.Load()), &a, now)
	}
	return st, nil
}

func (l *userLeg) Original(number uint16) (uint16, bool) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.original(number)
}

// original is Original's, r.mu held.
func (r *userReceiver) original(number uint16) (uint16, bool) {
	return r.adapt.Original(number, r.sim != nil)
}

func (l *userLeg) FrameSent(frame uint16) (sent, known bool) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.adapt.FrameSent(frame)
}

func (l *userLeg) Packet(number uint16) ([]byte, bool) {
	l.r.mu.Lock()
	seq, owed := l.r.original(number)
	enc, shift := l.r.adapt.Sim.Encoding, l.r.adapt.Sim.Shift
	l.r.mu.Unlock()
	if l.r.sim == nil {
		enc = 0
	}
	if !owed || enc >= layers.MaxEncodings {
		return nil, false
	}
	p, _, ok := l.r.video.enc[enc].history.packet(seq)
	if ok && l.r.sim != nil && len(p) >= 12 {
		asReceived(p, l.r.sim, *l.r.video.format.Load(), seq, shift)
	}
	return p, ok
}

func (l *userLeg) Send(p []byte, twccOff int) error {
	if l.r.removed.Load() {
		return errLegGone
	}
	if l.r.tw != nil && twccOff > 0 && twccOff+2 <= len(p) {
		stampTWCC(p, twccOff, l.r.tw.take(len(p)+l.u.fwd.keys.overhead(l.r.To)))
	}
	return l.u.fwd.writeTo(p, l.r.From, l.r.To)
}

func (l *userLeg) Sent(seq uint16) (Sent, bool) {
	if l.r.tw == nil {
		return Sent{}, false
	}
	return l.r.tw.sent(seq)
}

func (l *userLeg) TWCC() bool { return l.r.tw != nil }

// streamFrom is the stream from a sender's address.
func (u *User) streamFrom(from netip.AddrPort) (*userStream, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	if s, ok := u.streams[addrport.Unmap(from)]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("dataplane: no stream from %v", from)
}
