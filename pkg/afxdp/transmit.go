package afxdp

import (
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/egress"
)

// Sending around the kernel: WriteBatch writes each datagram's frame
// (Ethernet, IP and UDP headers, checksums) into a send frame of the
// AF_XDP socket of the interface the kernel would send it out of, to the
// next hop the kernel's neighbour table names, and wakes the kernel once
// a batch. Only where the kernel would send the same frame unchanged:
// a plain unicast route out of an interface the conn listens on, its
// neighbour resolved, no qdisc that shapes, no TC egress program, no
// netfilter hook on output or postrouting (egress.Bypassed), DF as the
// socket sends it, within the path's MTU. Everything else, and what the
// send frames cannot take, goes through the kernel socket (sendmmsg),
// counted by why.

// txReason is why a datagram went through the kernel socket.
type txReason int

const (
	txRoute     txReason = iota // the route is not a plain unicast one (or the kernel has none)
	txNeighbour                 // the next hop is not resolved yet
	txConfirm                   // the neighbour entry is stale: the kernel sends this one and confirms it
	txInterface                 // out of an interface the conn does not listen on
	txEgress                    // a qdisc, TC egress program or netfilter hook the kernel's sending passes through
	txTooLong                   // over the path's MTU or a send frame
	txRingFull                  // no send frame free
	txSocket                    // the socket's options (no DF) make frames not built here
	txNoRing                    // the interface's socket has no TX ring (locked memory)
	txReasons
)

var txReasonNames = [txReasons]string{"route", "neighbour", "confirm", "interface", "egress", "too_long", "ring_full", "socket_options", "no_tx_ring"}

// Path lookups are kept this long: a route, neighbour or egress change
// takes effect within it.
const pathTTL = time.Second

// maxPaths bounds the destinations kept (beyond, they are looked up again).
const maxPaths = 4096

// txFrames is the send frames of each socket.
const txFrames = 1024

// transmit is a conn's sending state, one WriteBatch at a time.
type transmit struct {
	mu      sync.Mutex
	paths   map[netip.Addr]*txPath
	bypass  map[int]bypassCheck
	opts    socketOptions
	optsAt  time.Time
	routes  []*txPath        // per message of the batch being sent (nil: the kernel)
	why     []txReason       // per message sent through the kernel
	kmsgs   []ipv4.Message   // sendmmsg's
	kaddrs  []net.UDPAddr    // their addresses
	kips    [][16]byte       // and the addresses' bytes
	batch4  *ipv4.PacketConn // the kernel socket as a batch
	viaXDP  atomic.Uint64
	viaKern [txReasons]atomic.Uint64
	lastWhy atomic.Pointer[string] // the last egress or route refusal, for Stats
}

// txPath is a destination's path, looked up at most pathTTL before.
type txPath struct {
	path    egress.Path
	src     netip.AddrPort
	q       *queue // nil: through the kernel, for why
	why     txReason
	until   time.Time
	confirm bool   // the neighbour is stale: the next datagram goes through the kernel
	header  header // but the IPv4 ID, which counts per datagram (idCounts)
	idCount bool
	// retry: without a neighbour entry, the kernel's send resolves one;
	// it is looked for again after retry, doubling up to pathTTL.
	retry time.Duration
}

// neighbourRetry is how soon a destination without a neighbour entry is
// looked up again: resolving one on a link takes a round trip or two.
const neighbourRetry = 5 * time.Millisecond

type bypassCheck struct {
	why   string
	until time.Time
}

// SendStats count the datagrams the conn sent, by path.
type SendStats struct {
	ViaXDP    uint64
	ViaKernel map[string]uint64 // by reason (nonzero only)
	// Refusal is the last reason a destination's path went through the
	// kernel (a route, a neighbour, what its egress would pass by).
	Refusal string
}

// WriteBatch sends ms[i].Buf to ms[i].Addr, as ipv4.PacketConn.WriteBatch
// (sendmmsg) does, through the AF_XDP sockets where the kernel would send
// the same frame (see above) and through the kernel socket otherwise, in
// order. It sets each sent message's N and returns how many it sent; an
// error is the kernel socket's, for the message after the last sent.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	c.mu.RLock() // the sockets stay open while their frames are written
	defer c.mu.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	t := &c.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.route(c, ms, now)
	done := 0
	for done < len(ms) {
		end := done + 1
		q := queueOf(t.routes[done])
		for end < len(ms) && queueOf(t.routes[end]) == q {
			end++
		}
		if q == nil {
			n, err := t.sendKernel(c, ms[done:end], t.why[done:end])
			done += n
			if err != nil {
				return done, err
			}
			continue
		}
		n := t.sendXDP(q, ms[done:end], t.routes[done:end])
		for i := done + n; i < end; i++ {
			t.routes[i], t.why[i] = nil, txRingFull // the rest of the run through the kernel, in order
		}
		done += n
	}
	return done, nil
}

func queueOf(p *txPath) *queue {
	if p == nil {
		return nil
	}
	return p.q
}

// route fills t.routes and t.why for ms.
func (t *transmit) route(c *Conn, ms []Message, now time.Time) {
	if now.After(t.optsAt) {
		t.opts, t.optsAt = c.readSocketOptions(), now.Add(pathTTL)
	}
	t.routes, t.why = t.routes[:0], t.why[:0]
	for i := range ms {
		p, why := t.pathFor(c, ms[i].Addr, len(ms[i].Buf), now)
		t.routes, t.why = append(t.routes, p), append(t.why, why)
	}
}

// pathFor is to's path for a datagram of n bytes, or nil and why not.
func (t *transmit) pathFor(c *Conn, to netip.AddrPort, n int, now time.Time) (*txPath, txReason) {
	dst := to.Addr().Unmap()
	if to.Port() == 0 {
		return nil, txRoute // (the kernel's EINVAL)
	}
	p := t.paths[dst]
	if p == nil || now.After(p.until) {
		t.makeRoom(now)
		retry := neighbourRetry
		if p != nil && p.why == txNeighbour {
			retry = min(2*p.retry, pathTTL)
		}
		p = t.lookup(c, dst, to.Port(), now)
		if p.why == txNeighbour {
			p.retry, p.until = retry, now.Add(retry)
		}
		t.paths[dst] = p
	}
	switch {
	case p.q == nil:
		return nil, p.why
	case frameLen(dst, n)-ethLen > p.path.MTU || frameLen(dst, n) > frameSize:
		return nil, txTooLong
	case p.confirm:
		p.confirm = false
		return nil, txConfirm
	}
	return p, 0
}

// makeRoom keeps the path cache under maxPaths: the expired go first.
func (t *transmit) makeRoom(now time.Time) {
	if t.paths == nil {
		t.paths = map[netip.Addr]*txPath{}
	}
	if len(t.paths) < maxPaths {
		return
	}
	for a, p := range t.paths {
		if now.After(p.until) {
			delete(t.paths, a)
		}
	}
	if len(t.paths) >= maxPaths {
		clear(t.paths)
	}
}

// lookup finds dst's path now (the destination port is the first
// datagram's: routing rules may match ports).
func (t *transmit) lookup(c *Conn, dst netip.Addr, port uint16, now time.Time) *txPath {
	// (Kept pathTTL, less up to a quarter: a fan-out's paths, looked up
	// together, spread their next lookups.)
	p := &txPath{until: now.Add(pathTTL - rand.N(pathTTL/4))}
	local := c.localAddrPort()
	if t.opts.refusal != "" {
		p.why = txSocket
		t.refused(t.opts.refusal)
		return p
	}
	bound := local.Addr()
	if dst.Is6() && !c.v6Socket || dst.Is4() && (t.opts.v6only || bound.Is6() && !bound.IsUnspecified() && !bound.Is4In6()) {
		p.why = txRoute // a family the socket cannot send to: the kernel says so
		return p
	}
	path, err := c.ns.egress.Lookup(egress.Query{Dst: dst, Src: bound, SrcPort: local.Port(), DstPort: port, TOS: t.opts.tos, UID: t.opts.uid})
	if err != nil {
		var r *egress.Refusal
		p.why = txRoute
		if errors.As(err, &r) && r.Neighbour {
			p.why = txNeighbour
		}
		t.refused(err.Error())
		return p
	}
	p.path, p.src = path, netip.AddrPortFrom(path.Src.Unmap(), local.Port())
	if p.q = c.txQueue(path.Ifindex); p.q == nil {
		p.why = txInterface
		return p
	}
	if why := p.q.noTX; why != "" {
		p.q, p.why = nil, txNoRing
		t.refused("no TX ring: " + why)
		return p
	}
	why, until := t.bypassed(c, path.Ifindex, now)
	p.until = minTime(p.until, until) // a change on the egress shows within pathTTL
	if why != "" {
		p.q, p.why = nil, txEgress
		t.refused(why)
		return p
	}
	p.header, p.idCount = t.opts.header(dst, p.src, port, &path)
	p.confirm = !path.Confirmed
	return p
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (t *transmit) refused(why string) { t.lastWhy.Store(&why) }

// bypassed is what sending around the kernel on ifindex would pass by
// (egress.Bypassed, kept pathTTL; an error reads as something), and until
// when that holds.
func (t *transmit) bypassed(c *Conn, ifindex int, now time.Time) (string, time.Time) {
	if b, ok := t.bypass[ifindex]; ok && now.Before(b.until) {
		return b.why, b.until
	}
	why, err := c.ns.egress.Bypassed(ifindex)
	if err != nil {
		why = err.Error()
	}
	if t.bypass == nil {
		t.bypass = map[int]bypassCheck{}
	}
	b := bypassCheck{why, now.Add(pathTTL)}
	t.bypass[ifindex] = b
	return b.why, b.until
}

// sendXDP queues ms (all for q) on q's TX ring; it returns how many it
// took. With every send frame in flight it waits for the kernel to
// complete some, as a blocking socket waits for its send buffer, but no
// longer than completionWait: then the rest goes through the kernel.
func (t *transmit) sendXDP(q *queue, ms []Message, paths []*txPath) int {
	q.txMu.Lock()
	defer q.txMu.Unlock()
	done := 0
	var giveUp time.Time
	for done < len(ms) {
		rest, restPaths := ms[done:], paths[done:]
		n, err := q.sock.SendFrames(len(rest), func(i int, f []byte) int {
			p := restPaths[i]
			dst := netip.AddrPortFrom(rest[i].Addr.Addr().Unmap(), rest[i].Addr.Port())
			rest[i].N = len(rest[i].Buf)
			h := p.header
			if p.idCount {
				p.header.id++
			}
			return writeFrame(f, &p.path, p.src, dst, rest[i].Buf, h)
		})
		done += n
		if err != nil {
			break // (queued frames go with the next wakeup; the rest through the kernel, which reports)
		}
		switch now := time.Now(); {
		case n > 0:
			giveUp = time.Time{}
			continue
		case giveUp.IsZero():
			giveUp = now.Add(completionWait)
		case now.After(giveUp):
			t.viaXDP.Add(uint64(done))
			return done
		}
		time.Sleep(completionPoll)
	}
	t.viaXDP.Add(uint64(done))
	return done
}

// A sender out of send frames polls the completion ring every
// completionPoll, for up to completionWait: in copy mode a frame completes
// once the receiving side has taken its copy (a veth peer's NAPI, which
// may be busy or preempted for a millisecond or two).
const (
	completionPoll = 20 * time.Microsecond
	completionWait = 10 * time.Millisecond
)

// sendKernel sends ms through the kernel socket with sendmmsg.
func (t *transmit) sendKernel(c *Conn, ms []Message, why []txReason) (int, error) {
	if t.batch4 == nil {
		t.batch4 = ipv4.NewPacketConn(c.udp) // (sendmmsg serves both families: the address says which)
	}
	t.kmsgs, t.kaddrs = t.kmsgs[:0], t.kaddrs[:0]
	for len(t.kips) < len(ms) {
		t.kips = append(t.kips, [16]byte{})
	}
	for i := range ms {
		a := ms[i].Addr.Addr()
		if !c.v6Socket {
			a = a.Unmap()
		}
		ip := t.kips[i][:a.BitLen()/8]
		if a.Is4() {
			*(*[4]byte)(ip) = a.As4()
		} else {
			*(*[16]byte)(ip) = a.As16()
		}
		t.kaddrs = append(t.kaddrs, net.UDPAddr{IP: ip, Port: int(ms[i].Addr.Port()), Zone: a.Zone()})
	}
	for i := range ms {
		t.kmsgs = append(t.kmsgs, ipv4.Message{Buffers: [][]byte{ms[i].Buf}, Addr: &t.kaddrs[i]})
	}
	n, err := t.batch4.WriteBatch(t.kmsgs, 0)
	for i := range max(n, 0) {
		ms[i].N = t.kmsgs[i].N
		t.viaKern[why[i]].Add(1)
	}
	return max(n, 0), err
}

// txQueue is the socket to send out of ifindex with (its first queue's),
// nil if the conn does not listen there.
func (c *Conn) txQueue(ifindex int) *queue {
	for _, it := range c.ifaces {
		if it.index == ifindex && len(it.queues) > 0 {
			return it.queues[0]
		}
	}
	return nil
}

// localAddrPort is the kernel socket's bound address.
func (c *Conn) localAddrPort() netip.AddrPort {
	return c.udp.LocalAddr().(*net.UDPAddr).AddrPort()
}

// socketOptions are the kernel socket's settings a frame built here
// depends on, as readSocketOptions found them.
type socketOptions struct {
	// refusal: an option makes the kernel's frames what these would not
	// be (a mark or bound device its route follows, IP options, a
	// priority, a path MTU discovery mode sending without DF...), or one
	// could not be read: everything goes through the kernel.
	refusal string
	ttl     uint8 // IPv4 TTL
	tos     uint8 // IPv4 TOS
	hops    uint8 // IPv6 hop limit (what the socket reads: its own, or the namespace's default)
	tclass  uint8
	idZero  bool // IP_PMTUDISC_DO or PROBE: DF datagrams with ID 0, as the kernel sends them
	v6only  bool
	flowLab bool // IPv6 automatic flow labels
	uid     uint32
}

// header is what a path's frames carry: the socket's TTL and TOS (IPv6:
// its hop limit, or the interface's where it sets none and reads the
// default; a flow label per flow where the kernel makes one), an IPv4 ID
// counting from a random start (the kernel's for an unconnected socket
// is a hashed counter per destination) unless DF datagrams carry 0.
func (o *socketOptions) header(dst netip.Addr, src netip.AddrPort, port uint16, p *egress.Path) (header, bool) {
	if dst.Is4() {
		return header{ttl: o.ttl, tos: o.tos, id: uint16(rand.Uint32())}, !o.idZero
	}
	h := header{ttl: o.hops, tos: o.tclass}
	if int(o.hops) == p.DefaultHopLimit {
		h.ttl = uint8(p.HopLimit)
	}
	if o.flowLab {
		h.flowLabel = flowLabel(src, netip.AddrPortFrom(dst, port))
	}
	return h, false
}

// flowLabel is a flow's IPv6 label: a hash of its addresses and ports,
// never 0 (the kernel's own hash has a secret key: a flow's frames from
// the kernel socket carry another label).
func flowLabel(src, dst netip.AddrPort) uint32 {
	h := fnv.New32a()
	b, _ := src.MarshalBinary()
	h.Write(b)
	b, _ = dst.MarshalBinary()
	h.Write(b)
	return max(h.Sum32()&0xfffff, 1)
}

// readSocketOptions reads the kernel socket's options.
func (c *Conn) readSocketOptions() (o socketOptions) {
	o.uid = uint32(os.Getuid())
	raw, err := c.udp.SyscallConn()
	if err != nil {
		o.refusal = "socket: " + err.Error()
		return o
	}
	err = raw.Control(func(fd uintptr) {
		var errs []error
		get := func(level, opt int) int {
			v, err := unix.GetsockoptInt(int(fd), level, opt)
			errs = append(errs, err)
			return v
		}
		refuse := func(why string) {
			if o.refusal == "" {
				o.refusal = "socket option " + why
			}
		}
		o.ttl, o.tos = uint8(get(unix.IPPROTO_IP, unix.IP_TTL)), uint8(get(unix.IPPROTO_IP, unix.IP_TOS))
		switch get(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER) {
		case unix.IP_PMTUDISC_WANT:
		case unix.IP_PMTUDISC_DO, unix.IP_PMTUDISC_PROBE:
			o.idZero = true
		default:
			refuse("IP_MTU_DISCOVER (datagrams without DF)")
		}
		if get(unix.SOL_SOCKET, unix.SO_MARK) != 0 {
			refuse("SO_MARK (routing by mark)")
		}
		if get(unix.SOL_SOCKET, unix.SO_PRIORITY) != 0 {
			refuse("SO_PRIORITY")
		}
		if get(unix.IPPROTO_IP, unix.IP_UNICAST_IF) != 0 {
			refuse("IP_UNICAST_IF")
		}
		if dev, err := unix.GetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE); err != nil || dev != "" {
			refuse("SO_BINDTODEVICE")
		}
		if opts, err := unix.GetsockoptString(int(fd), unix.IPPROTO_IP, unix.IP_OPTIONS); err != nil || opts != "" {
			refuse("IP_OPTIONS")
		}
		if c.v6Socket {
			o.hops, o.tclass = uint8(get(unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS)), uint8(get(unix.IPPROTO_IPV6, unix.IPV6_TCLASS))
			o.v6only = get(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY) != 0
			o.flowLab = get(unix.IPPROTO_IPV6, unix.IPV6_AUTOFLOWLABEL) != 0
			if get(unix.IPPROTO_IPV6, unix.IPV6_UNICAST_IF) != 0 {
				refuse("IPV6_UNICAST_IF")
			}
			for _, opt := range []int{unix.IPV6_HOPOPTS, unix.IPV6_RTHDRDSTOPTS, unix.IPV6_RTHDR, unix.IPV6_DSTOPTS} {
				if ext, err := unix.GetsockoptString(int(fd), unix.IPPROTO_IPV6, opt); err == nil && ext != "" {
					refuse("IPv6 extension headers")
				}
			}
			if pi, err := unix.GetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_PKTINFO); err == nil && strings.Trim(pi, "\x00") != "" {
				refuse("IPV6_PKTINFO (a sticky source or interface)")
			}
		}
		if err := errors.Join(errs...); err != nil {
			refuse("unreadable: " + err.Error())
		}
	})
	if err != nil && o.refusal == "" {
		o.refusal = "socket: " + err.Error()
	}
	return o
}

// sendStats reads the counters.
func (t *transmit) sendStats() SendStats {
	st := SendStats{ViaXDP: t.viaXDP.Load(), ViaKernel: map[string]uint64{}}
	for r := range txReasons {
		if n := t.viaKern[r].Load(); n > 0 {
			st.ViaKernel[txReasonNames[r]] = n
		}
	}
	if w := t.lastWhy.Load(); w != nil {
		st.Refusal = *w
	}
	return st
}
