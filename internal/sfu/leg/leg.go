package leg

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pion/rtcp"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
)

// LegConfig is one receiver of a sender's stream: its receive-only
// connection for that sender, as its answer negotiated it.
type LegConfig struct {
	Receiver string         // the receiving participant: its legs share a link
	From, To netip.AddrPort // the SFU's address on the connection, the receiver's
	TTL      uint8
	// TWCC: transport-wide congestion control negotiated (the extension
	// and its feedback): the SFU estimates the link from its feedback.
	// Without it, from the receiver's REMB.
	TWCC    bool
	TWCCExt uint8 // the extension's id (the sender's)
	// RTX: retransmissions (and probes) on their own stream; nil:
	// retransmissions on the media SSRC, and no probes.
	RTX *RTX
	// Notify tells the receiver's page its video from this sender paused
	// or resumed, and why it paused: PausedBandwidth (its link carries
	// too little for the lowest layer) or PausedLastN.
	Notify func(paused bool, why string)
	// Encrypted: the connection is SRTP. A (SSRC, number) is never sent
	// again with other bytes (a second sealing under one nonce gives
	// AES-GCM's authentication key away): no retransmission under the
	// media SSRC, no padding under a number that carried media.
	Encrypted bool
}

func (c LegConfig) same(o LegConfig) bool {
	return c.Receiver == o.Receiver && c.From == o.From && c.To == o.To && c.TWCC == o.TWCC && c.TWCCExt == o.TWCCExt && c.Encrypted == o.Encrypted &&
		(c.RTX == nil) == (o.RTX == nil) && (c.RTX == nil || *c.RTX == *o.RTX)
}

func (c LegConfig) receiver() dataplane.Receiver {
	return dataplane.Receiver{From: c.From, To: c.To, TTL: c.TTL, TWCC: c.TWCC}
}

// Leg is one sender's stream to one receiver.
type Leg struct {
	sender *Sender
	link   *link
	cfg    LegConfig
	dp     dataplane.Leg // nil until attached

	repairMu sync.Mutex // taken before mu
	mu       sync.Mutex
	remb     float64 // the receiver's REMB for this leg, smoothed (bits/s)
	reader   ratecontrol.FeedbackReader
	rtxSeq   uint16
	lastTS   uint32 // of the last packet retransmitted (probes' timestamps)
	target   int    // ratecontrol's
	reason   string // of the last move
	switches map[string]uint64
	resent   map[uint16]time.Duration // numbers retransmitted lately, when
	repairs  repairQueue              // numbers NACKed, waiting for room
	repeats  []repeat                 // retransmissions to send a second time (randomLoss), by when
	counts   Retransmissions
	probe    probeState
	hidden   bool // last-N: its sender is not among the receiver's most recent speakers
}

// Why a leg's video paused (LegConfig.Notify).
const (
	PausedBandwidth = "bandwidth"
	PausedLastN     = "last-n"
)

// Retransmissions is what became of the packets a receiver NACKed.
type Retransmissions struct {
	Sent    uint64 // from the SFU's history
	Asked   uint64 // not in the history: the sender was asked
	NotOwed uint64 // the receiver does not get their layer (or never had them)
	// Paced and Repeated count what happened on the way too: a packet
	// that waited for room is counted paced, then sent or superseded.
	Paced    uint64 // waited for room in the link's budget
	Repeated uint64 // NACKed again while waiting, or within a round trip of its retransmission
	// Superseded: given up for a key frame asked of the sender (its
	// burst could not be repaired within repairWithin; NACKed again while
	// the key frame comes; the queue full).
	Superseded uint64
	// Doubled: retransmissions sent a second time, on a link that loses
	// packets at random (of Sent).
	Doubled uint64
}

type probeState struct {
	rate  float64 // padding, bits/s
	until time.Duration
	owed  float64 // bits
	last  time.Duration
}

func newLeg(s *Sender, cfg LegConfig) *Leg {
	return &Leg{sender: s, cfg: cfg, target: ratecontrol.EveryLayer, switches: map[string]uint64{},
		resent: map[uint16]time.Duration{}, rtxSeq: uint16(time.Now().UnixNano())}
}

// attach takes the leg's data plane handle and joins its routes and link.
func (l *Leg) attach() error {
	dp, err := l.sender.t.cfg.Plane.Leg(l.sender.cfg.From, l.cfg.To)
	if err != nil {
		return err
	}
	l.dp = dp
	l.link = l.sender.t.linkOf(l.cfg.Receiver)
	l.link.add(l)
	l.sender.t.cfg.Routes.add(l)
	return nil
}

// detach leaves the routes and the link (the stream's list is the
// sender's to change).
func (l *Leg) detach() {
	l.sender.t.cfg.Routes.remove(l)
	if l.link != nil {
		l.link.remove(l)
		l.sender.t.dropLink(l.link)
	}
}

// Close removes the leg: from the stream in the data plane, its routes,
// its link.
func (l *Leg) Close() error {
	err := l.sender.remove(l)
	l.detach()
	return err
}

// Config is what the leg was made with.
func (l *Leg) Config() LegConfig { return l.cfg }

// feedback is the receiver's RTCP compound about this leg.
func (l *Leg) feedback(pkts []rtcp.Packet) {
	received := l.sender.t.cfg.Now()
	for _, pkt := range pkts {
		switch p := pkt.(type) {
		case *rtcp.ExtendedReport:
			l.answerReferenceTime(p, received)
		case *rtcp.TransportLayerNack:
			var numbers []uint16
			for _, pair := range p.Nacks {
				numbers = append(numbers, pair.PacketList()...)
			}
			l.retransmit(numbers)
		case *rtcp.PictureLossIndication:
			l.sender.requestKeyFrame(p.MediaSSRC)
		case *rtcp.FullIntraRequest:
			for _, e := range p.FIR { // RFC 5104 4.3.1: the SSRCs asked for are in the entries
				l.sender.requestKeyFrame(e.SSRC)
			}
		case *rtcp.ReceiverEstimatedMaximumBitrate:
			l.mu.Lock()
			if l.remb == 0 {
				l.remb = float64(p.Bitrate)
			} else {
				l.remb = (1-rembWeight)*l.remb + rembWeight*float64(p.Bitrate)
			}
			l.mu.Unlock()
		case *rtcp.TransportLayerCC:
			l.transportFeedback(p)
		}
	}
}

// rembWeight is the EWMA weight of a new REMB.
const rembWeight = 0.3

func (l *Leg) transportFeedback(fb *rtcp.TransportLayerCC) {
	if l.dp == nil || l.link == nil {
		return
	}
	l.mu.Lock()
	acks := l.reader.Acks(fb, func(seq uint16) (ratecontrol.SentPacket, bool) {
		s, ok := l.dp.Sent(seq)
		return ratecontrol.SentPacket{At: s.At, Size: s.Size + wireOverhead}, ok
	})
	l.mu.Unlock()
	l.link.feedback(l, l.sender.t.cfg.Now(), acks)
}

// retransmit answers a NACK (numbers: the receiver's): from the sender's
// history, to this receiver only, what it is owed; what needs no room in
// the link's budget at once (padding, a NACK to the sender for what the
// SFU never got), retransmissions of media oldest first as the budget
// has room (repair).
func (l *Leg) retransmit(numbers []uint16) {
	if l.dp == nil {
		return
	}
	now := l.sender.t.cfg.Now()
	var ask []uint16
	for _, n := range numbers {
		l.mu.Lock()
		switch {
		case l.repairs.superseded(n, now):
			l.counts.Superseded++
			l.mu.Unlock()
			continue
		case l.repairs.in.has(n):
			l.counts.Repeated++ // it waits already
			l.mu.Unlock()
			continue
		}
		inTurn := len(l.repairs.waiting) == 0 // (media goes now only ahead of nothing waiting)
		l.mu.Unlock()
		out, seq, size := l.resend(n, now, inTurn)
		switch out {
		case askSender:
			ask = append(ask, seq)
		case noRoom:
			l.mu.Lock()
			if !l.repairs.add(n, size, now) {
				l.counts.Superseded++ // the queue is full
			}
			l.mu.Unlock()
		}
	}
	if len(ask) > 0 {
		l.sender.askFor(l.nackSSRC(), ask)
	}
	l.repair(now)
}

// repair sends the waiting retransmissions the link's budget has room
// for, oldest first. Where the oldest has waited longer than
// repairWithin, the budget cannot repair the burst while it matters: what
// waits is given up (superseded) and the sender asked for a key frame
// instead (at most one a keyFrameRepairHold; none for a paused leg).
func (l *Leg) repair(now time.Duration) {
	l.repairMu.Lock() // one drain at a time (a NACK's, the pacing's): the oldest goes once
	defer l.repairMu.Unlock()
	var ask []uint16
	defer func() {
		if len(ask) > 0 {
			l.sender.askFor(l.nackSSRC(), ask)
		}
	}()
	for {
		l.mu.Lock()
		if l.repairs.overdue(now) {
			keyFrame := l.target != ratecontrol.Paused &&
				(l.repairs.givenAt == 0 || now-l.repairs.givenAt >= keyFrameRepairHold)
			l.counts.Superseded += uint64(l.repairs.giveUp(now, keyFrame))
			l.mu.Unlock()
			if keyFrame {
				l.sender.KeyFrame()
			}
			return
		}
		w, ok := l.repairs.oldest()
		l.mu.Unlock()
		if !ok {
			return
		}
		if l.link != nil && !l.link.retransmitFits(now, w.size) {
			l.mu.Lock()
			l.counts.Paced += uint64(l.repairs.markPaced())
			l.mu.Unlock()
			return // (no lookups while it cannot go)
		}
		out, seq, _ := l.resend(w.number, now, true)
		l.mu.Lock()
		if out == noRoom {
			l.counts.Paced += uint64(l.repairs.markPaced())
			l.mu.Unlock()
			return
		}
		l.repairs.pop() // (only this drain removes: the oldest is still w)
		l.mu.Unlock()
		if out == askSender {
			ask = append(ask, seq)
		}
	}
}

// resendOutcome is what became of one NACKed number.
type resendOutcome int

const (
	resent    resendOutcome = iota
	notOwed                 // a layer the receiver does not get (padding again where the number held padding)
	askSender               // not in the history: the sender is asked
	noRoom                  // the link's budget has no room for it now (or it waits its turn)
	repeated                // resent within the last round trip already
)

// resend sends number n again: on RTX where the receiver negotiated it,
// under its own number where it did not; padding where the receiver does
// not get its layer or its video is paused. A retransmission of media
// goes only when media is set (its turn: nothing waits before it), and
// takes its size, which resend returns with noRoom; for askSender, the
// sender's seq.
func (l *Leg) resend(n uint16, now time.Duration, media bool) (out resendOutcome, seq uint16, size int) {
	seq, owed := l.dp.Original(n)
	if !owed {
		l.count(func(c *Retransmissions) { c.NotOwed++ })
		return notOwed, 0, 0
	}
	l.mu.Lock()
	paused := l.target == ratecontrol.Paused
	l.mu.Unlock()
	orig, ok := l.dp.Packet(n)
	switch {
	case !ok && paused:
		l.count(func(c *Retransmissions) { c.NotOwed++ })
		return notOwed, 0, 0
	case !ok:
		l.count(func(c *Retransmissions) { c.Asked++ })
		return askSender, seq, 0
	case l.cfg.Encrypted && l.cfg.RTX == nil && !l.droppedFrame(orig):
		// A retransmission would put other bytes under a number sealed
		// before (Encrypted): the receiver waits for the next key frame.
		l.count(func(c *Retransmissions) { c.NotOwed++ })
		return notOwed, 0, 0
	case l.cfg.Encrypted && paused && !l.droppedFrame(orig):
		// Padding under the number would too: it goes on RTX instead,
		// an empty payload under the original number (what a receiver
		// takes as padding for it), which stops its NACKs as well.
		if out := l.mayResend(n, now, 16); out != resent {
			return out, 0, 0
		}
		l.sendRTX(dataplane.PaddingPacket(orig, n), n)
		l.count(func(c *Retransmissions) { c.NotOwed++ })
		return notOwed, 0, 0
	case paused || l.droppedFrame(orig):
		// A late packet of a layer the receiver does not get took the
		// number kept for it as padding, which was lost: it gets padding
		// again, as the data plane sent it. Paused, the receiver gets
		// padding for what it lost before the pause: its decoder starts
		// again at the resumption's key frame, and Chromium, getting no
		// more packets, NACKs a lost one every 100 ms until something
		// comes under its number (11 s of it in a run).
		if out := l.mayResend(n, now, 16); out != resent {
			return out, 0, 0
		}
		_ = l.dp.Send(dataplane.PaddingPacket(orig, n), 0)
		l.count(func(c *Retransmissions) { c.NotOwed++ })
		return notOwed, 0, 0
	}
	size = len(orig)
	if l.cfg.RTX != nil {
		size += rtxOverhead
	}
	if !media {
		return noRoom, 0, size
	}
	if out := l.mayResend(n, now, size); out != resent {
		return out, 0, size
	}
	switch err := l.sendRTX(orig, n); {
	case errors.Is(err, errNotRTP):
		l.count(func(c *Retransmissions) { c.NotOwed++ }) // not RTP: nothing to resend
		return notOwed, 0, 0
	case err == nil:
		l.count(func(c *Retransmissions) { c.Sent++ })
		l.repeatLater(n, now)
	}
	return resent, 0, size
}

// A retransmission on a link that loses packets at random goes a second
// time, repeatAfter later (random loss takes packets one at a time, a few
// ms apart they are lost apart): one lost is otherwise asked again only
// after the receiver's idea of the round trip, which libwebrtc takes as
// 100 ms on a receive-only connection that learned none
// (answerReferenceTime), and the frame waiting for it freezes (1% random
// loss froze a Chromium receiver's stream once in a third of the
// shaped-receiver test's lossy phases; its unshaped peer never).
const (
	repeatAfter = 10 * time.Millisecond
	maxRepeats  = 64
)

type repeat struct {
	number uint16 // the receiver's
	due    time.Duration
}

// repeatLater queues number's retransmission to go again where the link
// loses packets at random.
func (l *Leg) repeatLater(number uint16, now time.Duration) {
	if l.link == nil || !l.link.randomLoss(now) {
		return
	}
	l.mu.Lock()
	if len(l.repeats) < maxRepeats {
		l.repeats = append(l.repeats, repeat{number: number, due: now + repeatAfter})
	}
	l.mu.Unlock()
}

// sendRepeats sends the second copies due, where no repair waits and the
// link's budget has room: a second copy never delays a first.
func (l *Leg) sendRepeats(now time.Duration) {
	l.mu.Lock()
	i := 0
	for i < len(l.repeats) && l.repeats[i].due <= now {
		i++
	}
	due := slices.Clone(l.repeats[:i])
	l.repeats = l.repeats[i:]
	waiting := len(l.repairs.waiting) > 0
	l.mu.Unlock()
	if waiting || l.dp == nil {
		return
	}
	for _, r := range due {
		orig, ok := l.dp.Packet(r.number)
		if !ok {
			continue
		}
		size := len(orig)
		if l.cfg.RTX != nil {
			size += rtxOverhead
		}
		if !l.link.retransmit(now, size) {
			continue
		}
		if l.sendRTX(orig, r.number) == nil {
			l.count(func(c *Retransmissions) { c.Doubled++ })
		}
	}
}

// rtxOverhead: an RTX packet carries the original sequence number too.
const rtxOverhead = 2

// droppedFrame says whether orig's frame is one the data plane did not
// send the receiver (its layer was dropped).
func (l *Leg) droppedFrame(orig []byte) bool {
	frame, ok := l.sender.frameOf(orig)
	if !ok {
		return false
	}
	sent, known := l.dp.FrameSent(frame)
	return known && !sent
}

// mayResend: number was not resent within the last round trip
// (repeated), and the link's budget has room for size bytes (noRoom),
// which it takes.
func (l *Leg) mayResend(number uint16, now time.Duration, size int) resendOutcome {
	rtt := 100 * time.Millisecond
	if l.link != nil {
		rtt = max(l.link.rtt(), 50*time.Millisecond)
	}
	l.mu.Lock()
	at, ok := l.resent[number]
	if ok && now-at < rtt {
		l.counts.Repeated++
		l.mu.Unlock()
		return repeated
	}
	l.mu.Unlock()
	if l.link != nil && !l.link.retransmit(now, size) { // the link's lock is never taken under the leg's
		return noRoom
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resent[number] = now
	if len(l.resent) > 512 {
		for n, at := range l.resent {
			if now-at > time.Second {
				delete(l.resent, n)
			}
		}
	}
	return resent
}

func (l *Leg) count(f func(*Retransmissions)) {
	l.mu.Lock()
	f(&l.counts)
	l.mu.Unlock()
}

// apply takes a round's decision: the data plane's target, the reason
// logged, the page told when video pauses or resumes (and a key frame
// asked for: the decoder needs one after a pause).
func (l *Leg) apply(d ratecontrol.Decision) {
	l.mu.Lock()
	old := l.target
	if d.Reason == "" || d.Target == old {
		l.mu.Unlock()
		return
	}
	l.target, l.reason = d.Target, d.Reason
	l.switches[switchKind(old, d)]++
	l.mu.Unlock()
	t := l.sender.t
	if err := l.dp.SetTarget(d.Target); err != nil {
		return
	}
	t.cfg.Log.Debug("layer switch", "room", l.sender.cfg.Room, "sender", l.sender.cfg.ID, "receiver", l.cfg.Receiver,
		"from", targetName(old), "to", targetName(d.Target), "reason", d.Reason)
	paused, resumed := d.Target == ratecontrol.Paused, old == ratecontrol.Paused
	if resumed {
		l.sender.KeyFrame()
	}
	if (paused || resumed) && l.cfg.Notify != nil {
		why := ""
		switch {
		case paused && strings.HasPrefix(d.Reason, "last-N"):
			why = PausedLastN
		case paused:
			why = PausedBandwidth
		}
		l.cfg.Notify(paused, why)
	}
}

// switchKind is a move's kind, as the metrics count them.
func switchKind(old int, d ratecontrol.Decision) string {
	switch {
	case d.Target == ratecontrol.Paused:
		return "pause"
	case old == ratecontrol.Paused:
		return "resume"
	case old == ratecontrol.EveryLayer:
		return "first"
	case d.Target > old:
		return "up"
	}
	return "down"
}

// TargetName is a target as logs and ebrtc top say it.
func TargetName(t int) string { return targetName(t) }

func targetName(t int) string {
	switch t {
	case ratecontrol.EveryLayer:
		return "every layer"
	case ratecontrol.Paused:
		return "paused"
	}
	return "decode target " + strconv.Itoa(t)
}

func (l *Leg) currentTarget() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.target
}

// switchWaiting is how long the data plane's up-switch has waited.
func (l *Leg) switchWaiting() time.Duration { return l.layers().SwitchWaiting }

// layers is the data plane's adaptation of the leg (zero without one).
func (l *Leg) layers() dataplane.ReceiverLayers {
	if l.dp == nil {
		return dataplane.ReceiverLayers{}
	}
	st, err := l.dp.State()
	if err != nil {
		return dataplane.ReceiverLayers{}
	}
	return st
}

// nackSSRC is the sender's SSRC whose numbers Original gives: its video's
// or, simulcast, the encoding the receiver takes (0: none). (A switch
// between Original and this asks the new encoding for numbers of the old:
// at worst a packet comes twice, and the history drops it.)
func (l *Leg) nackSSRC() uint32 {
	if !l.sender.simulcast() {
		return l.sender.cfg.VideoSSRC
	}
	return l.layers().EncodingSSRC
}

// input is the leg's stream as its link's round sees it.
func (l *Leg) input() ratecontrol.Input {
	in := ratecontrol.Input{Stream: l.sender.stream(), CanProbe: l.cfg.RTX != nil && l.cfg.TWCC, Silent: l.sender.silent()}
	l.mu.Lock()
	in.Hidden = l.hidden && len(in.Stream.Rates) > 0 // (the data plane pauses adapted video only)
	if !l.cfg.TWCC {
		in.REMB = l.remb
	}
	l.mu.Unlock()
	return in
}

// startProbe sends padding at rate bits/s on this leg for length.
func (l *Leg) startProbe(now time.Duration, rate float64, length time.Duration) {
	l.mu.Lock()
	l.probe = probeState{rate: rate, until: now + length, last: now}
	l.mu.Unlock()
}

// pace sends the repairs the link has room for now, and the padding the
// leg's probe owes by now (none when probing is false: the link queues
// under it, and the probe ends). An idle leg costs one lock: the pacing
// runs over every leg every PaceInterval.
func (l *Leg) pace(now time.Duration, probing bool) {
	l.mu.Lock()
	if !probing {
		l.probe = probeState{}
	}
	waiting := len(l.repairs.waiting) > 0
	idle := !waiting && len(l.repeats) == 0 && l.probe.rate <= 0
	l.mu.Unlock()
	if idle {
		return
	}
	if waiting && l.dp != nil {
		l.repair(now)
	}
	l.sendRepeats(now)
	l.mu.Lock()
	p := &l.probe
	if p.rate <= 0 || l.dp == nil {
		l.mu.Unlock()
		return
	}
	end := min(now, p.until)
	if end > p.last {
		p.owed += p.rate * (end - p.last).Seconds()
		p.last = end
	}
	var pkts [][]byte
	var off int
	for p.owed > 0 {
		b, o, err := padding(l.cfg.RTX, l.rtxSeq, l.lastTS, l.cfg.TWCCExt)
		if err != nil {
			break
		}
		l.rtxSeq++
		p.owed -= float64(8 * len(b))
		pkts, off = append(pkts, b), o
	}
	if now >= p.until {
		l.probe = probeState{}
	}
	l.mu.Unlock()
	for _, b := range pkts {
		_ = l.dp.Send(b, off)
	}
}

// roomForSender is what this leg's link has room for of its sender's
// stream: its estimate less what its other streams take (+Inf: its link
// has shown no limit).
func (l *Leg) roomForSender() float64 {
	if l.link == nil {
		return math.Inf(1)
	}
	return l.link.roomFor(l)
}

// LegStatus is a leg's state, for metrics and ebrtc top.
type LegStatus struct {
	Room, Sender, Receiver string
	To                     netip.AddrPort
	Target                 int     // ratecontrol.EveryLayer, Paused, or a decode target
	Reason                 string  // of the last move
	Estimate               float64 // the link's, bits/s (0: none yet)
	EstimateSource         string  // "twcc" or "remb"
	Switches               map[string]uint64
	Retransmissions        Retransmissions
	Sent                   dataplane.Counter // replicas the data plane sent it
	TWCC, RTX              bool
}

func (l *Leg) status() LegStatus {
	st := LegStatus{Room: l.sender.cfg.Room, Sender: l.sender.cfg.ID, Receiver: l.cfg.Receiver, To: l.cfg.To,
		TWCC: l.cfg.TWCC, RTX: l.cfg.RTX != nil, Switches: map[string]uint64{}}
	if l.link != nil {
		st.Estimate, st.EstimateSource = l.link.estimate()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st.Target, st.Reason, st.Retransmissions = l.target, l.reason, l.counts
	for k, v := range l.switches {
		st.Switches[k] = v
	}
	return st
}
