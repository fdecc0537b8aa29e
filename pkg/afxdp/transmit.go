package afxdp

import (
	"errors"
	"net"
	"net/netip"
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
	txReasons
)

var txReasonNames = [txReasons]string{"route", "neighbour", "confirm", "interface", "egress", "too_long", "ring_full", "socket_options"}

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
	opts    ipOptions
	optsAt  time.Time
	routes  []*txPath        // per message of the batch being sent (nil: the kernel)
	why     []txReason       // per message sent through the kernel
	kmsgs   []ipv4.Message   // sendmmsg's
	kaddrs  []net.UDPAddr    // their addresses
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
	confirm bool // the neighbour is stale: the next datagram goes through the kernel
}

type bypassCheck struct {
	why   string
	until time.Time
}

// SendStats count the datagrams WriteBatch sent, by path.
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
		t.opts, t.optsAt = c.readIPOptions(), now.Add(pathTTL)
	}
	t.routes, t.why = t.routes[:0], t.why[:0]
	for i := range ms {
		p, why := t.pathFor(c, ms[i].Addr.Addr().Unmap(), len(ms[i].Buf), now)
		t.routes, t.why = append(t.routes, p), append(t.why, why)
	}
}

// pathFor is dst's path for a datagram of n bytes, or nil and why not.
func (t *transmit) pathFor(c *Conn, dst netip.Addr, n int, now time.Time) (*txPath, txReason) {
	p := t.paths[dst]
	if p == nil || now.After(p.until) {
		if t.paths == nil || len(t.paths) >= maxPaths {
			t.paths = map[netip.Addr]*txPath{}
		}
		p = t.lookup(c, dst, now)
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

// lookup finds dst's path now.
func (t *transmit) lookup(c *Conn, dst netip.Addr, now time.Time) *txPath {
	p := &txPath{until: now.Add(pathTTL)}
	local := c.localAddrPort()
	if dst.Is4() && !t.opts.dontFragmentOK {
		p.why = txSocket
		return p
	}
	if bound := local.Addr(); dst.Is6() && !c.v6Socket || dst.Is4() && bound.Is6() && !bound.IsUnspecified() && !bound.Is4In6() {
		p.why = txRoute // a family the socket cannot send to: the kernel says so
		return p
	}
	path, err := c.ns.egress.Lookup(dst, local.Addr())
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
	if why := t.bypassed(c, path.Ifindex, now); why != "" {
		p.q, p.why = nil, txEgress
		t.refused(why)
		return p
	}
	p.confirm = !path.Confirmed
	return p
}

func (t *transmit) refused(why string) { t.lastWhy.Store(&why) }

// bypassed is what sending around the kernel on ifindex would pass by
// (egress.Bypassed, kept pathTTL; an error reads as something).
func (t *transmit) bypassed(c *Conn, ifindex int, now time.Time) string {
	if b, ok := t.bypass[ifindex]; ok && now.Before(b.until) {
		return b.why
	}
	why, err := c.ns.egress.Bypassed(ifindex)
	if err != nil {
		why = err.Error()
	}
	if t.bypass == nil {
		t.bypass = map[int]bypassCheck{}
	}
	t.bypass[ifindex] = bypassCheck{why, now.Add(pathTTL)}
	return why
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
		n, _ := q.sock.SendFrames(len(rest), func(i int, f []byte) int {
			p := restPaths[i]
			dst := netip.AddrPortFrom(rest[i].Addr.Addr().Unmap(), rest[i].Addr.Port())
			rest[i].N = len(rest[i].Buf)
			return writeFrame(f, &p.path, p.src, dst, rest[i].Buf, &t.opts)
		})
		// (A kick's error leaves the frames queued: the next wakeup sends them.)
		done += n
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
	for i := range ms {
		a := ms[i].Addr.Addr()
		if !c.v6Socket {
			a = a.Unmap()
		}
		t.kaddrs = append(t.kaddrs, net.UDPAddr{IP: a.AsSlice(), Port: int(ms[i].Addr.Port()), Zone: a.Zone()})
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

// readIPOptions reads the socket options the kernel would put in the IP
// header (the kernel's defaults where unset).
func (c *Conn) readIPOptions() ipOptions {
	o := ipOptions{ttl: 64, hops: 64}
	raw, err := c.udp.SyscallConn()
	if err != nil {
		return o
	}
	raw.Control(func(fd uintptr) {
		get := func(level, opt int) (int, bool) {
			v, err := unix.GetsockoptInt(int(fd), level, opt)
			return v, err == nil
		}
		if v, ok := get(unix.IPPROTO_IP, unix.IP_TTL); ok {
			o.ttl = uint8(v)
		}
		if v, ok := get(unix.IPPROTO_IP, unix.IP_TOS); ok {
			o.tos = uint8(v)
		}
		if v, ok := get(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER); ok {
			o.dontFragmentOK = v == unix.IP_PMTUDISC_WANT || v == unix.IP_PMTUDISC_DO || v == unix.IP_PMTUDISC_PROBE
		}
		if c.v6Socket {
			if v, ok := get(unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS); ok {
				o.hops = uint8(v)
			}
			if v, ok := get(unix.IPPROTO_IPV6, unix.IPV6_TCLASS); ok {
				o.tclass = uint8(v)
			}
		}
	})
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
