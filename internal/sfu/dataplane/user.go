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
	SetStream(from netip.AddrPort, ssrcs []uint32, receivers []Receiver) error
	RemoveStream(from netip.AddrPort) error
	StreamStats(from netip.AddrPort) (in Counter, out []Counter, err error)
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
	ssrcs     []uint32
	receivers []Receiver
	in        counter
	out       []counter // per receiver
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
func (u *User) SetStream(from netip.AddrPort, ssrcs []uint32, receivers []Receiver) error {
	from = unmapped(from)
	if err := checkStream(from, ssrcs, receivers); err != nil {
		return err
	}
	rs := make([]Receiver, len(receivers))
	for i, r := range receivers {
		r.From, r.To = unmapped(r.From), unmapped(r.To)
		if _, ok := u.conns[r.From]; !ok {
			return fmt.Errorf("dataplane: receiver %d: no media socket at %v", i, r.From)
		}
		rs[i] = r
	}
	s := &userStream{ssrcs: append([]uint32(nil), ssrcs...), receivers: rs, out: make([]counter, len(rs))}
	u.mu.Lock()
	defer u.mu.Unlock()
	if old := u.streams[from]; old != nil {
		for _, ssrc := range old.ssrcs {
			delete(u.senders, userKey{from, ssrc})
		}
	}
	for _, ssrc := range ssrcs {
		u.senders[userKey{from, ssrc}] = s
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
	for _, ssrc := range s.ssrcs {
		delete(u.senders, userKey{from, ssrc})
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
func (u *User) StreamStats(from netip.AddrPort) (Counter, []Counter, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.streams[unmapped(from)]
	if !ok {
		return Counter{}, nil, fmt.Errorf("dataplane: no stream from %v", from)
	}
	out := make([]Counter, len(s.out))
	for i := range s.out {
		out[i] = s.out[i].load()
	}
	return s.in.load(), out, nil
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
	o, ssrc, replicate := Classify(p)
	if !replicate {
		u.count(o, len(p))
		if (o == Stun || o == RTCPToAgent) && u.cfg.Upcall != nil {
			u.cfg.Upcall(p, from, c.conn)
		}
		return out
	}
	u.mu.RLock()
	s := u.senders[userKey{from, ssrc}]
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
	// Replicas leave by their From socket; runs of one socket go in one sendmmsg.
	for i := 0; i < len(s.receivers); {
		first, via := i, s.receivers[i].From
		out = out[:0]
		for ; i < len(s.receivers) && s.receivers[i].From == via; i++ {
			out = append(out, ipv4.Message{Buffers: [][]byte{p}, Addr: net.UDPAddrFromAddrPort(s.receivers[i].To)})
		}
		sent, _ := u.conns[via].batch.WriteBatch(out, 0)
		for k := range out {
			if k < sent {
				u.count(Replica, len(p))
				s.out[first+k].add(len(p))
			} else {
				u.count(CloneFailed, len(p))
			}
		}
	}
	u.count(Replicated, len(p))
	return out
}

func unmapped(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
