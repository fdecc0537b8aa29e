package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Plane is what the SFU asks of a data plane, in the kernel or not.
type Plane interface {
	SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error
	RemoveStream(from netip.AddrPort) error
	StreamStats(from netip.AddrPort) (StreamStats, error)
	Outcomes() (map[Outcome]Counter, error)
	// Rate adaptation: a receiver's decode target of a sender's video,
	// what the data plane measures and decided, and the sender's number
	// behind a receiver's.
	SetTarget(from, to netip.AddrPort, target int) error
	Layers(from netip.AddrPort) (Layers, error)
	Original(from, to netip.AddrPort, number uint16) (uint16, bool)
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
	Readers map[*net.UDPConn]DatagramReader
}

// DatagramReader receives datagrams one at a time.
type DatagramReader interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	Close() error
}

// User is the data plane in user space (--dataplane user): the decisions
// of the eBPF one (Classify), taken on datagrams read from the media
// sockets in batches (recvmmsg) and replicated with sendmmsg. It is the
// fair baseline for the eBPF data plane and the fallback where TC BPF is
// unavailable.
type User struct {
	cfg   UserConfig
	conns map[netip.AddrPort]*userConn

	mu      sync.RWMutex
	senders map[userKey]*userStream
	streams map[netip.AddrPort]*userStream

	counts [outcomeMax]counter
	wg     sync.WaitGroup
}

type userConn struct {
	conn   *net.UDPConn
	batch  *ipv4.PacketConn // recvmmsg/sendmmsg; works on IPv6 sockets too
	reader DatagramReader   // receives instead of batch, if set
}

type userKey struct {
	from netip.AddrPort
	ssrc uint32
}

type userStream struct {
	sources   []Source
	receivers []*userReceiver
	in        *counter
	video     *userVideo // shared by the stream's versions (SetStream)
}

// userVideo is a stream's rate adaptation state (bpf/sfu.c's
// sender_templates and layer_bytes).
type userVideo struct {
	mu        sync.Mutex
	structure []byte
	templates sfuLayerTemplates
	bytes     [8]counter // per layer (layers.MaxTargets)
}

type userReceiver struct {
	Receiver
	out     counter
	waiting atomic.Bool // for a key frame (video only)

	target atomic.Uint32 // layers.AllTargets, or a decode target
	mu     sync.Mutex
	adapt  layers.Replica
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

type counter struct{ packets, bytes atomic.Uint64 }

func (c *counter) add(bytes int) {
	c.packets.Add(1)
	c.bytes.Add(uint64(bytes))
}

func (c *counter) load() Counter { return Counter{Packets: c.packets.Load(), Bytes: c.bytes.Load()} }

const userBatch = 32

// NewUser starts reading the media sockets; Close stops it (and closes them).
func NewUser(cfg UserConfig) (*User, error) {
	if len(cfg.Conns) == 0 {
		return nil, errors.New("dataplane: user: no media sockets")
	}
	u := &User{cfg: cfg, conns: map[netip.AddrPort]*userConn{}, senders: map[userKey]*userStream{},
		streams: map[netip.AddrPort]*userStream{}}
	for _, c := range cfg.Conns {
		local := unmapped(c.LocalAddr().(*net.UDPAddr).AddrPort())
		if local.Addr().IsUnspecified() {
			return nil, fmt.Errorf("dataplane: user: socket %v: bind a specific address (replicas leave from it)", local)
		}
		u.conns[local] = &userConn{conn: c, batch: ipv4.NewPacketConn(c), reader: cfg.Readers[c]}
	}
	for _, c := range u.conns {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			u.serve(c)
		}()
	}
	return u, nil
}

// SetStream is DataPlane.SetStream's: receivers' From must be one of the
// sockets' addresses; interfaces, MACs and TTL are the kernel's business.
func (u *User) SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error {
	from = unmapped(from)
	if err := checkStream(from, sources, receivers); err != nil {
		return err
	}
	receivers = unmappedReceivers(receivers)
	for i, r := range receivers {
		if _, ok := u.conns[r.From]; !ok {
			return fmt.Errorf("dataplane: receiver %d: no media socket at %v", i, r.From)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old := u.streams[from]
	s := &userStream{sources: append([]Source(nil), sources...), in: &counter{}, video: &userVideo{}}
	if old != nil {
		s.in, s.video = old.in, old.video
		for _, src := range old.sources {
			delete(u.senders, userKey{from, src.SSRC})
		}
	}
	for _, r := range receivers {
		var have *userReceiver
		if old != nil {
			have = old.receiver(r)
		}
		if have == nil {
			have = &userReceiver{Receiver: r, adapt: layers.NewReplica()}
			have.waiting.Store(true)
			have.target.Store(layers.AllTargets)
		}
		s.receivers = append(s.receivers, have)
	}
	for _, src := range sources {
		u.senders[userKey{from, src.SSRC}] = s
	}
	u.streams[from] = s
	return nil
}

// RemoveStream stops replicating the sender at from.
func (u *User) RemoveStream(from netip.AddrPort) error {
	from = unmapped(from)
	u.mu.Lock()
	defer u.mu.Unlock()
	s, ok := u.streams[from]
	if !ok {
		return fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, src := range s.sources {
		delete(u.senders, userKey{from, src.SSRC})
	}
	delete(u.streams, from)
	return nil
}

// Outcomes are the counters, as the eBPF data plane keeps them.
func (u *User) Outcomes() (map[Outcome]Counter, error) {
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
	s, ok := u.streams[unmapped(from)]
	if !ok {
		return StreamStats{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	st := StreamStats{In: s.in.load(), Out: make([]ReceiverStats, len(s.receivers))}
	video := hasVideo(s.sources)
	for i, r := range s.receivers {
		st.Out[i] = ReceiverStats{To: r.To, Counter: r.out.load(), Waiting: video && r.waiting.Load()}
	}
	return st, nil
}

// Close closes the sockets and waits for the readers.
func (u *User) Close() error {
	var errs []error
	for _, c := range u.conns {
		if c.reader != nil {
			errs = append(errs, c.reader.Close()) // and its kernel socket, c.conn
			continue
		}
		errs = append(errs, c.conn.Close())
	}
	u.wg.Wait()
	return errors.Join(errs...)
}

func (u *User) count(o Outcome, bytes int) { u.counts[o].add(bytes) }

func (u *User) upcall(p []byte, from netip.AddrPort, c *userConn) {
	if u.cfg.Upcall != nil {
		u.cfg.Upcall(p, from, c.conn)
	}
}

// serve reads a socket in batches until it is closed.
func (u *User) serve(c *userConn) {
	if c.reader != nil {
		u.serveReader(c)
		return
	}
	msgs := make([]ipv4.Message, userBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 1500)}
	}
	out := make([]ipv4.Message, 0, MaxFanout)
	for {
		n, err := c.batch.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		for _, m := range msgs[:n] {
			out = u.handle(c, m.Buffers[0][:m.N], m.Addr.(*net.UDPAddr), out[:0])
		}
	}
}

// serveReader reads a conn's reader until it is closed.
func (u *User) serveReader(c *userConn) {
	buf := make([]byte, 1500)
	out := make([]ipv4.Message, 0, MaxFanout)
	for {
		n, from, err := c.reader.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		out = u.handle(c, buf[:n], net.UDPAddrFromAddrPort(from), out[:0])
	}
}

// handle judges one datagram and replicates it where the eBPF data plane would.
func (u *User) handle(c *userConn, p []byte, src *net.UDPAddr, out []ipv4.Message) []ipv4.Message {
	from := unmapped(src.AddrPort())
	cl := Classify(p)
	if !cl.Replicate {
		u.count(cl.Outcome, len(p))
		if cl.Outcome == Stun || cl.Outcome == RTCPToAgent {
			u.upcall(p, from, c)
		}
		return out
	}
	u.mu.RLock()
	s := u.senders[userKey{from, cl.SSRC}]
	u.mu.RUnlock()
	if s == nil {
		u.count(UnknownSender, len(p))
		return out
	}
	if len(s.receivers) == 0 {
		u.count(NoReceivers, len(p))
		return out
	}
	s.in.add(len(p))
	source := s.source(cl.SSRC)
	gate := gateOf(source.Video, cl)
	frame, adapt := s.frame(p, cl, source)
	now := coarseNow()
	// Replicas leave by their From socket; runs of one socket go in one sendmmsg.
	var to []*userReceiver
	for i := 0; i < len(s.receivers); {
		via := s.receivers[i].From
		out, to = out[:0], to[:0]
		for ; i < len(s.receivers) && s.receivers[i].From == via; i++ {
			r := s.receivers[i]
			if gate == gateHold && r.waiting.Load() {
				u.count(Gated, len(p))
				continue
			}
			b := p
			if adapt {
				var o Outcome
				if b, o = u.adapted(c, r, p, &frame, now); b == nil {
					u.count(o, len(p))
					continue
				}
			}
			out = append(out, ipv4.Message{Buffers: [][]byte{b}, Addr: net.UDPAddrFromAddrPort(r.To)})
			to = append(to, r)
		}
		if len(out) == 0 {
			continue
		}
		sent, _ := u.conns[via].batch.WriteBatch(out, 0)
		for k, r := range to {
			if k < sent {
				u.count(Replica, len(p))
				r.out.add(len(p))
				if gate == gateOpen { // sent: its gate opens (bpf/sfu.c gate_open)
					r.waiting.Store(false)
				}
			} else {
				u.count(CloneFailed, len(p))
			}
		}
	}
	u.count(Replicated, len(p))
	return out
}

// gate is what a packet does to receivers waiting for a key frame
// (bpf/sfu.c enum gate).
type gate uint8

const (
	gateNone gate = iota // audio, sender reports
	gateHold             // video, not a key frame's start
	gateOpen             // a key frame's first packet
)

// source is the stream's source with this SSRC (its codec, its descriptor's extension).
func (s *userStream) source(ssrc uint32) Source {
	for _, src := range s.sources {
		if src.SSRC == ssrc {
			return src
		}
	}
	return Source{}
}

func gateOf(codec Codec, cl Classified) gate {
	switch {
	case codec == NoVideo || cl.Payload == nil:
		return gateNone
	case KeyFrameStart(codec, cl.Payload):
		return gateOpen
	}
	return gateHold
}

// frame is the packet's frame for rate adaptation (bpf/sfu.c video_frame),
// its bytes counted to its layer; false if the stream does not adapt.
func (s *userStream) frame(p []byte, cl Classified, src Source) (layers.Frame, bool) {
	if src.Video == NoVideo || src.DDExt == 0 || cl.Payload == nil {
		return layers.Frame{}, false
	}
	v := s.video
	v.mu.Lock()
	defer v.mu.Unlock()
	f, layer, structure := frameOf(p, len(p)-len(cl.Payload), src.DDExt, &v.templates)
	if structure != nil && !sameStructure(structure, v.structure) {
		if d, err := dd.Parse(structure, nil); err == nil && d.Structure != nil {
			v.templates, v.structure = templatesOf(d.Structure), append(v.structure[:0], structure...)
		}
	}
	if layer >= 0 {
		v.bytes[layer].add(len(p))
	}
	return f, true
}

// adapted is what receiver r gets of p: p itself, a renumbered copy, or
// padding in its place; nil and why when it gets nothing.
func (u *User) adapted(c *userConn, r *userReceiver, p []byte, f *layers.Frame, now uint64) ([]byte, Outcome) {
	r.mu.Lock()
	number, v := r.adapt.Decide(f, uint8(r.target.Load()), now)
	r.mu.Unlock()
	switch v {
	case layers.AsIs:
		return p, 0
	case layers.Drop:
		return nil, LayerDropped
	case layers.Padding:
		if _, err := u.conns[r.From].conn.WriteToUDPAddrPort(paddingPacket(p, number), r.To); err != nil {
			return nil, CloneFailed
		}
		return nil, PaddingUpcall
	}
	if number == binary.BigEndian.Uint16(p[2:]) {
		return p, 0 // the sender's number: no copy
	}
	b := append([]byte(nil), p...)
	binary.BigEndian.PutUint16(b[2:], number)
	return b, 0
}

// SetTarget is DataPlane.SetTarget.
func (u *User) SetTarget(from, to netip.AddrPort, target int) error {
	r, err := u.receiverTo(from, to)
	if err == nil {
		r.target.Store(targetValue(target))
	}
	return err
}

func (u *User) receiverTo(from, to netip.AddrPort) (*userReceiver, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[unmapped(from)]
	if !ok {
		return nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	for _, r := range s.receivers {
		if r.To == unmapped(to) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("dataplane: %v does not receive %v", to, from)
}

// Layers is DataPlane.Layers.
func (u *User) Layers(from netip.AddrPort) (Layers, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[unmapped(from)]
	if !ok {
		return Layers{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	v := s.video
	v.mu.Lock()
	out := Layers{Targets: int(v.templates.Targets)}
	var perLayer [layers.MaxTargets]uint64
	for l := range perLayer {
		perLayer[l] = v.bytes[l].load().Bytes
	}
	v.mu.Unlock()
	out.Bytes = cumulative(perLayer[:], out.Targets)
	now := coarseNow()
	for _, r := range s.receivers {
		r.mu.Lock()
		out.Receivers = append(out.Receivers, ReceiverLayers{To: r.To, Target: targetOf(uint8(r.target.Load())),
			Current: targetOf(r.adapt.Current), SwitchWaiting: waited(r.adapt.SwitchWait, now)})
		r.mu.Unlock()
	}
	return out, nil
}

// Original is DataPlane.Original.
func (u *User) Original(from, to netip.AddrPort, number uint16) (uint16, bool) {
	r, err := u.receiverTo(from, to)
	if err != nil {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adapt.RW.Started == 0 {
		return number, true
	}
	return r.adapt.RW.Original(number)
}

func unmapped(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
