package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
)

// Plane is what the SFU asks of a data plane, in the kernel or not.
type Plane interface {
	SetStream(from netip.AddrPort, sources []Source, receivers []Receiver) error
	RemoveStream(from netip.AddrPort) error
	StreamStats(from netip.AddrPort) (StreamStats, error)
	Outcomes() (map[Outcome]Counter, error)
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
	conn  *net.UDPConn
	batch *ipv4.PacketConn // recvmmsg/sendmmsg; works on IPv6 sockets too
}

type userKey struct {
	from netip.AddrPort
	ssrc uint32
}

type userStream struct {
	sources   []Source
	receivers []*userReceiver
	in        *counter
}

type userReceiver struct {
	Receiver
	out     counter
	waiting atomic.Bool // for a key frame (video only)
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
		u.conns[local] = &userConn{conn: c, batch: ipv4.NewPacketConn(c)}
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
	s := &userStream{sources: append([]Source(nil), sources...), in: &counter{}}
	if old != nil {
		s.in = old.in
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
			have = &userReceiver{Receiver: r}
			have.waiting.Store(true)
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
	gate := s.gate(cl)
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
			out = append(out, ipv4.Message{Buffers: [][]byte{p}, Addr: net.UDPAddrFromAddrPort(r.To)})
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

func (s *userStream) gate(cl Classified) gate {
	var codec Codec
	for _, src := range s.sources {
		if src.SSRC == cl.SSRC {
			codec = src.Video
		}
	}
	switch {
	case codec == NoVideo || cl.Payload == nil:
		return gateNone
	case KeyFrameStart(codec, cl.Payload):
		return gateOpen
	}
	return gateHold
}

func unmapped(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
