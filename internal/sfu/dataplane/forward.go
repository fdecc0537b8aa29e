package dataplane

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// Forwarding in user space: the user plane's for every datagram, and the
// eBPF plane's for what its program hands to the stack (fragments, IP
// options, GRO-merged skbs, a source only a loose reverse-path check
// accepts): the decisions of bpf/sfu.c, on state kept in Go (the user
// plane) or in the program's own maps (the eBPF plane), so a receiver's
// numbers, layers and transport-wide sequence run on whichever path a
// packet took.

// streamState is what forwarding reads and updates of one stream.
type streamState interface {
	source(ssrc uint32) (Source, bool)
	replicas() []replicaState
	received(bytes int, frameEnd bool)
	// arrived logs the sender's transport-wide number seq as arrived at
	// at (CLOCK_MONOTONIC; 0: now).
	arrived(seq uint16, size int, at time.Duration)
	// heard counts an audio packet's level (AudioLevels).
	heard(level uint8, voiced bool)
	// seenOrKeep: the packet is in its source's history (nobody gets it
	// again); if not, it is kept there. False without a history.
	seenOrKeep(src Source, seq uint16, ts uint32, p []byte) bool
	// encodingSent notes a packet of a simulcast encoding (its size on the
	// wire, whether it carries a dependency descriptor) at now, and says
	// which is the highest encoding live.
	encodingSent(src Source, size int, desc described, now uint64) (top uint8)
	// frame is the packet's frame for rate adaptation, its size (bytes
	// on the wire) counted to its layer, a structure it attaches installed.
	frame(p []byte, hdr int, src Source, size int) layers.Frame
}

// replicaState is what forwarding reads and updates of one receiver.
type replicaState interface {
	receiver() Receiver
	waiting() bool
	open()
	// decide is the receiver's layer decision and number (bpf/layers.h);
	// busy when another thread decides for it (the packet is not sent).
	decide(f *layers.Frame, now uint64) (number uint16, v layers.Verdict, busy bool)
	// decideEncoding is a simulcast receiver's (layers.DecideEncoding):
	// f of encoding enc with timestamp ts, top the highest live.
	decideEncoding(f *layers.Frame, enc uint8, ts uint32, top uint8, now uint64) (n layers.Numbers, v layers.Verdict, busy bool)
	// encodingInForce is the simulcast encoding the receiver takes and
	// the shift of its numbers (layers.NoEncoding: none yet).
	encodingInForce() (uint8, layers.Numbers)
	transportWide() *legTWCC // nil: no transport-wide numbers
	replicated(bytes int, frameEnd bool)
}

// gate is what a packet does to receivers waiting for a key frame
// (bpf/sfu.c enum gate).
type gate uint8

const (
	gateNone gate = iota // audio, sender reports
	gateHold             // video, not a key frame's start
	gateOpen             // a key frame's first packet
)

func gateOf(codec Codec, cl Classified) gate {
	switch {
	case codec == NoVideo || cl.Payload == nil:
		return gateNone
	case KeyFrameStart(codec, cl.Payload):
		return gateOpen
	}
	return gateHold
}

// forwarder sends replicas by the SFU's sockets and counts outcomes.
type forwarder struct {
	conns map[netip.AddrPort]*mediaConn // by local address
	count func(o Outcome, bytes int)
	// padding sends a receiver padding in place of a late packet of a
	// layer it does not get (nil: writeTo).
	padding func(p []byte, from, to netip.AddrPort) error
	// keys, if set, seal every RTP and RTCP packet sent (encrypted media,
	// protect.go).
	keys *protections
}

// mediaConn is one of the SFU's media sockets.
type mediaConn struct {
	conn   *net.UDPConn
	batch  *ipv4.PacketConn // recvmmsg/sendmmsg; works on IPv6 sockets too
	reader DatagramConn     // receives and sends instead of batch, if set
	read   atomic.Uint64    // datagrams its reader took
}

func newMediaConn(c *net.UDPConn, reader DatagramConn) *mediaConn {
	return &mediaConn{conn: c, batch: ipv4.NewPacketConn(c), reader: reader}
}

// writeTo sends p from this socket.
func (f *forwarder) writeTo(p []byte, from, to netip.AddrPort) error {
	c := f.conns[from]
	if c == nil {
		return fmt.Errorf("dataplane: no media socket at %v", from)
	}
	if f.keys != nil {
		sealed, err := f.keys.seal(make([]byte, 0, len(p)+sealOverhead), p, to)
		if err != nil {
			f.count(Unprotected, len(p))
			return err
		}
		p = sealed
	}
	_, err := c.conn.WriteToUDPAddrPort(p, to)
	return err
}

// sealOverhead is the most SRTP or SRTCP adds to a packet: a 16-byte
// tag, SRTCP's 4-byte index.
const sealOverhead = 32

// replicaBatch is one thread's scratch: one socket's run of replicas
// (bytes and receiver, as an AF_XDP conn's WriteBatch takes them; msgs is
// the same for sendmmsg) and a buffer per replica that differs from the
// input (renumbered, its own transport-wide number), reused packet after
// packet.
type replicaBatch struct {
	replicas []afxdp.Message
	msgs     []ipv4.Message
	to       []replicaState
	bufs     [][]byte
	sent     []bool // per replica, after send
	// Encrypted media: the input packet opened, what SRTP added to it
	// (its tag: counted in rates), and each replica sealed.
	plain    []byte
	overhead int
	sealed   [][]byte
	// repaired is the packet a retransmission carries (rtx.go).
	repaired []byte
	// rxAt is when the kernel received the input datagram (CLOCK_MONOTONIC,
	// from its socket's SO_TIMESTAMPNS; 0: unknown, now).
	rxAt time.Duration
}

func newReplicaBatch(encrypted bool) *replicaBatch {
	b := &replicaBatch{replicas: make([]afxdp.Message, 0, MaxFanout), bufs: make([][]byte, MaxFanout), sent: make([]bool, MaxFanout),
		repaired: make([]byte, 0, maxDatagram)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, 0, 1500)
	}
	if encrypted {
		b.plain, b.sealed = make([]byte, 0, maxDatagram), make([][]byte, MaxFanout)
		for i := range b.sealed {
			b.sealed[i] = make([]byte, 0, 1500+sealOverhead)
		}
	}
	return b
}

// packetInfo is what every replica's decision needs of one input packet.
type packetInfo struct {
	p        []byte
	size     int // on the wire: p and, with encrypted media, its SRTP tag
	gate     gate
	adapt    bool
	frame    layers.Frame
	twccOff  int
	frameEnd bool
	now      uint64
	// A simulcast encoding's packet: the video's, the encoding, the
	// packet's timestamp and its dependency descriptor's offset (0:
	// none), the highest encoding live; report: a sender report.
	sim    *Simulcast
	enc    uint8
	ts     uint32
	at     rewriteAt
	top    uint8
	report bool
}

// forward replicates RTP or a sender report (cl) of stream s to its
// receivers, runs of one socket in one sendmmsg.
func (f *forwarder) forward(s streamState, p []byte, cl Classified, b *replicaBatch) {
	src, _ := s.source(cl.SSRC)
	// Rates are counted as the links carry them: an encrypted packet with
	// the tag it came with (b.overhead), which its replicas carry too.
	pi := packetInfo{p: p, size: len(p) + b.overhead, now: coarseNow()}
	if cl.Payload != nil {
		hdr := len(p) - len(cl.Payload)
		// (A duplicate's transport-wide number is an arrival too: one left
		// out of the feedback reads as lost to the sender's estimate.)
		if src.TWCCExt != 0 {
			if pi.twccOff = twccOffset(p, hdr, src.TWCCExt); pi.twccOff > 0 {
				s.arrived(binary.BigEndian.Uint16(p[pi.twccOff:]), pi.size, b.rxAt)
			}
		}
		if src.History && s.seenOrKeep(src, binary.BigEndian.Uint16(p[2:]), binary.BigEndian.Uint32(p[4:]), p) {
			f.count(Duplicate, pi.size)
			return
		}
		pi.gate = gateOf(src.Video, cl)
		pi.frameEnd = src.Video != NoVideo && p[1]&0x80 != 0
		hearLevel(s, src, p)
		if src.Video != NoVideo && src.DDExt != 0 {
			pi.adapt, pi.frame = true, s.frame(p, hdr, src, pi.size)
			pi.frame.Key = pi.gate == gateOpen
		}
		if src.Simulcast != nil {
			simulcastPacket(s, src, cl, &pi)
		}
	} else if src.Simulcast != nil {
		pi.sim, pi.enc, pi.report = src.Simulcast, src.Encoding, true
	}
	rs := s.replicas()
	if len(rs) == 0 {
		f.count(NoReceivers, pi.size)
		return
	}
	s.received(pi.size, pi.frameEnd)
	for i := 0; i < len(rs); {
		via := rs[i].receiver().From
		b.replicas, b.to = b.replicas[:0], b.to[:0]
		for ; i < len(rs); i++ {
			rc := rs[i].receiver()
			if rc.From != via {
				break
			}
			if out := f.ready(rs[i], rc.To, &pi, b.bufs[len(b.replicas)][:0]); out != nil {
				b.replicas = append(b.replicas, afxdp.Message{Buf: out, Addr: rc.To})
				b.to = append(b.to, rs[i])
			}
		}
		f.send(via, &pi, b)
	}
	f.count(Replicated, pi.size)
}

// ready is replica r's bytes (p itself, or a copy in buf that differs),
// or nil when r gets nothing (counted); to is r's address.
func (f *forwarder) ready(r replicaState, to netip.AddrPort, pi *packetInfo, buf []byte) []byte {
	p := pi.p
	if pi.gate == gateHold && r.waiting() {
		f.count(Gated, pi.size)
		return nil
	}
	out, v, ok := f.adapted(r, pi, buf)
	if !ok {
		return nil
	}
	if v == layers.Padding {
		rc := r.receiver()
		send := f.padding
		if send == nil {
			send = f.writeTo
		}
		if err := send(PaddingPacket(out, binary.BigEndian.Uint16(out[2:])), rc.From, rc.To); err != nil {
			f.count(CloneFailed, pi.size)
		} else {
			f.count(PaddingUpcall, pi.size)
		}
		return nil
	}
	if l := r.transportWide(); l != nil && pi.twccOff > 0 {
		if &out[0] == &p[0] {
			out = append(buf, p...)
		}
		stampTWCC(out, pi.twccOff, l.take(len(p)+f.keys.overhead(to)))
	}
	return out
}

// adapted is the packet as r's layers (and simulcast encoding) make it:
// p itself or a copy in buf, under r's number; false when r gets nothing
// (counted). A Padding verdict's packet goes out emptied.
func (f *forwarder) adapted(r replicaState, pi *packetInfo, buf []byte) ([]byte, layers.Verdict, bool) {
	p := pi.p
	if pi.sim != nil {
		return f.adaptedEncoding(r, pi, buf)
	}
	if !pi.adapt {
		return p, layers.AsIs, true
	}
	number, v, busy := r.decide(&pi.frame, pi.now)
	switch {
	case f.withheld(v, busy, pi.size):
		return nil, v, false
	case number != binary.BigEndian.Uint16(p[2:]) && (v == layers.Send || v == layers.Padding):
		out := append(buf, p...)
		binary.BigEndian.PutUint16(out[2:], number)
		return out, v, true
	}
	return p, v, true
}

// withheld says (and counts) whether a receiver's decision keeps the
// packet from it.
func (f *forwarder) withheld(v layers.Verdict, busy bool, size int) bool {
	switch {
	case busy:
		f.count(LayerBusy, size)
	case v == layers.Other:
		f.count(OtherEncoding, size)
	case v == layers.Drop:
		f.count(LayerDropped, size)
	default:
		return false
	}
	return true
}

// adaptedEncoding is adapted for a packet of a simulcast encoding: only
// a receiver that takes it gets it, rewritten into its one stream.
func (f *forwarder) adaptedEncoding(r replicaState, pi *packetInfo, buf []byte) ([]byte, layers.Verdict, bool) {
	if pi.report {
		enc, shift := r.encodingInForce()
		if enc != pi.enc || len(pi.p) < 20 {
			f.count(OtherEncoding, pi.size)
			return nil, layers.Other, false
		}
		out := append(buf, pi.p...)
		rewriteReport(out, pi.sim, shift)
		return out, layers.Send, true
	}
	n, v, busy := r.decideEncoding(&pi.frame, pi.enc, pi.ts, pi.top, pi.now)
	if f.withheld(v, busy, pi.size) {
		return nil, v, false
	}
	out := append(buf, pi.p...)
	rewriteEncoding(out, pi.sim, n, pi.at)
	return out, v, true
}

// simulcastPacket fills in what receivers' decisions need of a simulcast
// encoding's RTP packet (one without a dependency descriptor: a frame of
// its own per packet, every packet forwarded).
func simulcastPacket(s streamState, src Source, cl Classified, pi *packetInfo) {
	p := pi.p
	pi.sim, pi.enc, pi.ts = src.Simulcast, src.Encoding, binary.BigEndian.Uint32(p[4:])
	padding, desc := paddingOnly(p, cl.Payload), undescribed
	if src.DDExt != 0 && !padding { // (a probe's descriptor, if any, says nothing: left as is)
		if off, n := rtpExtensionAt(p, len(p)-len(cl.Payload), src.DDExt); n >= 3 {
			pi.at.dd = off
		}
	}
	switch {
	case padding:
		desc = paddingPacket
	case pi.at.dd > 0:
		desc = withDescriptor
	}
	pi.top = s.encodingSent(src, pi.size, desc, pi.now)
	if pi.at.dd == 0 && !padding { // (negotiated, and not sent: Firefox's VP8)
		key := pi.gate == gateOpen
		pi.adapt = true
		pi.frame = layers.Frame{Packet: rewrite.Packet{Seq: binary.BigEndian.Uint16(p[2:]), Start: key, End: pi.frameEnd}, Key: key}
	}
	if !pi.adapt { // a padding packet of an encoding without descriptors
		pi.adapt = true
		pi.frame = layers.Frame{Packet: rewrite.Packet{Seq: binary.BigEndian.Uint16(p[2:]), Padding: true}}
	}
	if src.Video == VP8 && !padding {
		pi.at.vp8, pi.frame.VP8 = len(p)-len(cl.Payload), VP8PicturesOf(cl.Payload)
	}
}

// described is whether a simulcast encoding's packet carries a
// dependency descriptor.
type described uint8

const (
	undescribed    described = iota
	withDescriptor           //
	paddingPacket            // a probe: no media to say either way
)

// paddingOnly: an RTP packet whose payload is all padding (a probe).
func paddingOnly(p, payload []byte) bool {
	return p[0]&0x20 != 0 && len(payload) > 0 && int(payload[len(payload)-1]) == len(payload)
}

// sendEach sends replicas in as few batch calls as it can (an AF_XDP
// conn's WriteBatch, else sendmmsg, its messages made in msgs) and marks
// in sent which went: a batch stops at a message that fails (one
// receiver's route or queue), and the replicas after it, other
// receivers', go on in the next call rather than with it.
func sendEach(c *mediaConn, replicas []afxdp.Message, sent []bool, msgs *[]ipv4.Message) {
	clear(sent)
	if c == nil {
		return
	}
	write := func(from int) int {
		n, _ := c.batch.WriteBatch((*msgs)[from:], 0)
		return n
	}
	if c.reader != nil {
		write = func(from int) int {
			n, _ := c.reader.WriteBatch(replicas[from:])
			return n
		}
	} else {
		setMessages(msgs, replicas)
	}
	for start := 0; start < len(replicas); {
		n := max(write(start), 0)
		for k := start; k < start+n; k++ {
			sent[k] = true
		}
		start += n + 1 // past the one that failed
	}
}

// setMessages makes msgs sendmmsg's messages for replicas, reusing each
// message's buffer list and address from the packets before (no
// allocation per replica).
func setMessages(msgs *[]ipv4.Message, replicas []afxdp.Message) {
	for len(*msgs) < len(replicas) {
		*msgs = append(*msgs, ipv4.Message{Buffers: make([][]byte, 1), Addr: &net.UDPAddr{IP: make(net.IP, 0, 16)}})
	}
	*msgs = (*msgs)[:len(replicas)]
	for i, r := range replicas {
		m := &(*msgs)[i]
		m.Buffers[0] = r.Buf
		ua := m.Addr.(*net.UDPAddr)
		if a := r.Addr.Addr(); a.Is4() {
			b := a.As4()
			ua.IP = append(ua.IP[:0], b[:]...)
		} else {
			b := a.As16()
			ua.IP = append(ua.IP[:0], b[:]...)
		}
		ua.Port, ua.Zone = int(r.Addr.Port()), r.Addr.Addr().Zone()
	}
}

// send sends one socket's run of replicas and counts what went.
func (f *forwarder) send(via netip.AddrPort, pi *packetInfo, b *replicaBatch) {
	if len(b.replicas) == 0 {
		return
	}
	if f.keys != nil {
		f.sealReplicas(pi, b)
	}
	if len(b.sent) < len(b.replicas) {
		b.sent = make([]bool, len(b.replicas))
	}
	sent := b.sent[:len(b.replicas)]
	sendEach(f.conns[via], b.replicas, sent, &b.msgs)
	for k, r := range b.to {
		if !sent[k] {
			f.count(CloneFailed, pi.size)
			continue
		}
		size := len(b.replicas[k].Buf) // as sent: sealed, its tag included
		f.count(Replica, size)
		r.replicated(size, pi.frameEnd)
		if pi.gate == gateOpen { // sent: its gate opens (bpf/sfu.c gate_open)
			r.open()
		}
	}
}
