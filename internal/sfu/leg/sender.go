package leg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/rtcp"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
)

// SenderConfig is one publisher's send-only connection.
type SenderConfig struct {
	Room, ID  string         // for logs and metrics
	From, Via netip.AddrPort // its transport address, and the SFU's on its connection
	Sources   []dataplane.Source
	// VideoSSRC is its video's SSRC (0: none): key frames and
	// retransmissions are asked for it.
	VideoSSRC uint32
	// Priority orders its legs' streams in their links' allocations
	// (ratecontrol.Stream.Priority: a shared screen's before cameras').
	Priority int
}

// frameOf is the frame number of video packet p (its dependency
// descriptor's), if it is the sender's video and carries one.
func (s *Sender) frameOf(p []byte) (uint16, bool) {
	for _, src := range s.cfg.Sources {
		ssrc := src.SSRC
		if src.Simulcast != nil { // the packet as its receiver gets it (Leg.Packet)
			ssrc = src.Simulcast.SSRC
		}
		if ssrc != s.cfg.VideoSSRC || src.DDExt == 0 || len(p) < 12 || binary.BigEndian.Uint32(p[8:]) != ssrc {
			continue
		}
		if off, n := dataplane.ExtensionOffset(p, src.DDExt); n >= 3 {
			return binary.BigEndian.Uint16(p[off+1:]), true
		}
	}
	return 0, false
}

// Sender is one publisher's stream in the data plane and what the SFU asks
// of the publisher for all its legs: key frames (one per interval however
// many receivers need one), retransmissions of what the SFU never got (one
// NACK per packet however many receivers ask), and the estimate of its
// best downlink (REMB).
type Sender struct {
	t   *Table
	cfg SenderConfig

	mu      sync.Mutex
	legs    []*Leg
	closed  bool
	lastPLI map[uint32]time.Duration
	asked   map[askedPacket]time.Duration // packets NACKed to the sender, when

	// Rates, from the data plane's counters (observe).
	layers      ratecontrol.Rates
	total       ratecontrol.Rates
	targets     []float64 // per decode target, bits/s
	totalRate   float64
	videoRate   float64
	otherRate   float64            // besides the video's layers: its audio
	otherFloor  ratecontrol.Window // otherRate's recent values: it is the lowest
	lastTargets int
	encodings   []dataplane.Encoding // of its simulcast video, live ones
	lastREMB    time.Duration
	rembSent    float64
	rooms       ratecontrol.Window // the best downlink's room, recent values (senderRoomSpan)
	// Its video's bytes (top target) and when they last grew: silent.
	videoBytes uint64
	videoAt    time.Duration
	silentNow  bool
	// Its audio's levels (speakers.go): the data plane's sums at the
	// last round, the mean loudness since, and whether it has levels.
	levels   dataplane.AudioLevels
	loudness float64
	speaks   bool

	// The sender's transport-cc feedback (nil: it has no transport-wide numbers).
	arrivals *dataplane.ArrivalLog
	recorder *twcc.Recorder
	lastFB   time.Duration
}

// sfuSSRC is the SSRC the SFU's own RTCP goes out with.
const sfuSSRC = 0x5f0e7b1c

// AddSender installs the publisher's stream (no receivers yet).
func (t *Table) AddSender(cfg SenderConfig) (*Sender, error) {
	if err := t.cfg.Plane.SetStream(cfg.From, cfg.Sources, nil); err != nil {
		return nil, err
	}
	s := &Sender{t: t, cfg: cfg, lastPLI: map[uint32]time.Duration{}, asked: map[askedPacket]time.Duration{},
		otherFloor: ratecontrol.Window{Span: otherWindow}}
	if slices.ContainsFunc(cfg.Sources, func(src dataplane.Source) bool { return src.TWCCExt != 0 }) {
		if log, err := t.cfg.Plane.Arrivals(cfg.From); err == nil {
			s.arrivals, s.recorder = log, twcc.NewRecorder(sfuSSRC)
		}
	}
	t.mu.Lock()
	old := t.senders[cfg.From]
	t.senders[cfg.From] = s
	t.mu.Unlock()
	if old != nil {
		old.closeLegs()
	}
	return s, nil
}

// Legs are the sender's legs now.
func (s *Sender) Legs() []*Leg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.legs)
}

// SetLegs makes the sender's stream go to exactly these receivers: legs
// it had keep their state, new ones are made (and the sender asked for a
// key frame: a newcomer decodes nothing before one), the others close.
func (s *Sender) SetLegs(cfgs []LegConfig) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("leg: the sender is gone")
	}
	var keep, gone []*Leg
	fresh := false
	for _, c := range cfgs {
		i := slices.IndexFunc(s.legs, func(l *Leg) bool { return l.cfg.same(c) })
		if i >= 0 {
			keep = append(keep, s.legs[i])
			continue
		}
		keep = append(keep, newLeg(s, c))
		fresh = true
	}
	for _, l := range s.legs {
		if !slices.Contains(keep, l) {
			gone = append(gone, l)
		}
	}
	s.legs = keep
	err := s.install()
	s.mu.Unlock()
	for _, l := range gone {
		l.detach()
	}
	for _, l := range keep {
		if err == nil && l.dp == nil {
			err = l.attach()
		}
	}
	if fresh {
		s.KeyFrame()
	}
	return err
}

// install tells the data plane where the stream goes now (s.mu held).
func (s *Sender) install() error {
	rs := make([]dataplane.Receiver, len(s.legs))
	for i, l := range s.legs {
		rs[i] = l.cfg.receiver()
	}
	return s.t.cfg.Plane.SetStream(s.cfg.From, s.cfg.Sources, rs)
}

// remove takes one leg out of the stream.
func (s *Sender) remove(l *Leg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.legs, l)
	if i < 0 || s.closed {
		return nil
	}
	s.legs = slices.Delete(s.legs, i, i+1)
	return s.install()
}

// Close removes the stream and every leg of it.
func (s *Sender) Close() error {
	s.closeLegs()
	s.t.mu.Lock()
	if s.t.senders[s.cfg.From] == s {
		delete(s.t.senders, s.cfg.From)
	}
	s.t.forgetSpeakerLocked(s) // (with the delete: a round in between would rank it again)
	s.t.mu.Unlock()
	return s.t.cfg.Plane.RemoveStream(s.cfg.From)
}

func (s *Sender) closeLegs() {
	s.mu.Lock()
	s.closed = true
	legs := s.legs
	s.legs = nil
	s.mu.Unlock()
	for _, l := range legs {
		l.detach()
	}
}

// KeyFrame asks the sender for a key frame of its video, unless one was
// asked for within the interval (for a receiver waiting for one, and when
// its camera comes back on).
func (s *Sender) KeyFrame() { s.requestKeyFrame(s.cfg.VideoSSRC) }

func (s *Sender) requestKeyFrame(ssrc uint32) {
	for _, ssrc := range s.keyFrameSSRCs(ssrc) {
		if ssrc != 0 && s.firstPLI(ssrc) {
			s.t.cfg.Log.Debug("key frame asked", "room", s.cfg.Room, "sender", s.cfg.ID, "ssrc", ssrc)
			s.sendRTCP(&rtcp.PictureLossIndication{SenderSSRC: sfuSSRC, MediaSSRC: ssrc})
		}
	}
}

// keyFrameSSRCs are the sender's SSRCs a key frame of ssrc is asked of:
// for its simulcast video (receivers know it by the SFU's SSRC), every
// live encoding's. (Asking only for the encoding a receiver waits for or
// takes saved key frames, and in one of two runs left a receiver 9 s
// without the Firefox encoding it waited for.)
func (s *Sender) keyFrameSSRCs(ssrc uint32) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ssrc != s.cfg.VideoSSRC || len(s.encodings) == 0 {
		return []uint32{ssrc}
	}
	out := make([]uint32, 0, len(s.encodings))
	for _, e := range s.encodings {
		out = append(out, e.SSRC)
	}
	return out
}

// firstPLI says whether a key frame of ssrc may be asked for now.
func (s *Sender) firstPLI(ssrc uint32) bool {
	now := s.t.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.lastPLI[ssrc]; ok && now-last < s.t.cfg.PLIInterval {
		return false
	}
	s.lastPLI[ssrc] = now
	return true
}

// askedPacket is a packet NACKed to the sender: an SSRC of its own (a
// simulcast encoding's) and its sequence number there.
type askedPacket struct {
	ssrc uint32
	seq  uint16
}

// askFor NACKs the sender for packets of its SSRC ssrc the SFU never got,
// each at most once a round trip's worth (200 ms) however many receivers
// ask.
func (s *Sender) askFor(ssrc uint32, seqs []uint16) {
	if ssrc == 0 {
		return
	}
	now := s.t.cfg.Now()
	s.mu.Lock()
	var ask []uint16
	for _, seq := range seqs {
		k := askedPacket{ssrc, seq}
		if at, ok := s.asked[k]; ok && now-at < 200*time.Millisecond {
			continue
		}
		s.asked[k] = now
		ask = append(ask, seq)
	}
	if len(s.asked) > 1024 {
		for k, at := range s.asked {
			if now-at > time.Second {
				delete(s.asked, k)
			}
		}
	}
	s.mu.Unlock()
	if len(ask) > 0 {
		s.sendRTCP(&rtcp.TransportLayerNack{SenderSSRC: sfuSSRC, MediaSSRC: ssrc, Nacks: rtcp.NackPairsFromSequenceNumbers(ask)})
	}
}

func (s *Sender) sendRTCP(pkts ...rtcp.Packet) {
	b, err := rtcp.Marshal(pkts)
	if err == nil {
		err = s.t.cfg.Plane.Send(b, s.cfg.Via, s.cfg.From)
	}
	if err != nil {
		s.t.cfg.Log.Debug("rtcp to sender", "room", s.cfg.Room, "sender", s.cfg.ID, "err", err)
	}
}

// observe reads the stream's rates from the data plane's counters: per
// decode target, and the whole stream.
func (s *Sender) observe(now time.Duration) {
	plane := s.t.cfg.Plane
	ls, lerr := plane.Layers(s.cfg.From)
	st, serr := plane.StreamStats(s.cfg.From)
	s.mu.Lock()
	defer s.mu.Unlock()
	if lerr == nil {
		s.observeSilence(now, ls)
		if !slices.Equal(ls.Encodings, s.encodings) {
			// A simulcast video's encodings came or went: its targets
			// are other ones than those measured.
			s.layers = ratecontrol.Rates{Window: s.layers.Window}
		}
		s.layers.Observe(now, ls.Bytes)
		s.targets = s.layers.Bitrates(now)
		if ls.Targets == 0 {
			s.targets = nil
		}
	}
	if serr == nil {
		s.total.Observe(now, []uint64{st.In.Bytes + wireOverhead*st.In.Packets})
		s.totalRate = s.total.Bitrates(now)[0]
	}
	s.videoRate = 0
	if n := len(s.targets); n > 0 {
		s.videoRate = s.targets[n-1] * videoOverhead
	}
	if lerr == nil {
		s.encodings = ls.Encodings
		if rate, ok := encodingsRate(s.targets, ls.Encodings); ok {
			s.videoRate = rate * videoOverhead
		}
	}
	// What the stream sends besides its video's layers (its audio): kept
	// from before while a new structure's rates are measured, and the
	// lowest of the last otherWindow (a key frame, a new structure's
	// first windows, make the difference jump for a moment: the audio did
	// not).
	if n := len(s.targets); n == s.lastTargets && s.videoRate > 0 {
		s.otherFloor.Add(now, max(s.totalRate-s.videoRate, 0))
		s.otherRate, _ = s.otherFloor.Min()
	}
	s.lastTargets = len(s.targets)
}

// encodingsRate is what a simulcast video's encodings send together
// (each its top target's rate), if targets has them all.
func encodingsRate(targets []float64, encs []dataplane.Encoding) (float64, bool) {
	sum, at := 0.0, 0
	for _, e := range encs {
		at += e.Targets
		if at > len(targets) {
			return 0, false
		}
		sum += targets[at-1]
	}
	return sum, len(encs) > 0
}

// observeSilence notes whether the sender's video has sent nothing for
// silentAfter (a camera turned off, a publisher that joined without one):
// its legs' links keep its place for its return (ratecontrol.Input.Silent).
// Only adapted video counts (a link allocates no other).
func (s *Sender) observeSilence(now time.Duration, ls dataplane.Layers) {
	n := len(ls.Bytes)
	if n == 0 || ls.Targets == 0 {
		s.silentNow = false
		return
	}
	if top := ls.Bytes[n-1]; top != s.videoBytes || s.videoAt == 0 {
		s.videoBytes, s.videoAt = top, now
	}
	s.silentNow = now-s.videoAt >= silentAfter
}

// silentAfter: video that sent nothing for this long is silent (a screen
// that does not change still sends a frame a second or so).
const silentAfter = 2 * time.Second

// silent says whether the sender's video is silent (observeSilence).
func (s *Sender) silent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silentNow
}

// Rates are on the wire, as a link carries them: wireOverhead is what
// Ethernet, IPv4 and UDP add to each RTP packet; videoOverhead the share
// it adds to video's (packets of about a thousand bytes), whose layers are
// counted in bytes only. Audio's small packets pay half as much again.
const (
	wireOverhead  = 14 + 20 + 8
	videoOverhead = 1.04
	otherWindow   = 5 * time.Second
)

// stream is the sender's stream as a link's allocation sees it.
func (s *Sender) stream() ratecontrol.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ratecontrol.Stream{Full: s.totalRate, Other: s.otherRate, Priority: s.cfg.Priority}
	if len(s.targets) > 0 && s.targets[len(s.targets)-1] > 0 {
		st.Rates = make([]float64, len(s.targets))
		for i, r := range s.targets {
			st.Rates[i] = r * videoOverhead
		}
	}
	return st
}

// senderRoomSpan: the sender is told the highest room its best downlink
// had over this long. An estimate saws, and one unshaped receiver's dips
// (a queue a CPU stall built) are no limit of the sender's: the lowered
// encoder would show every other receiver (a clean-clone make test saw a
// 3-party meeting's unshaped receiver's dip take the sender from 250 to
// 143 kbit/s). A link that stays narrower tells it once this long has
// passed; meanwhile its own receiver's layers adapt.
const senderRoomSpan = 3 * time.Second

// afterRound asks the sender for key frames its legs wait for, and tells
// it the estimate of its best downlink (REMB): what the best of its
// receivers' links has room for, its other streams aside, at its highest
// of the last senderRoomSpan; nothing while one of them shows no limit
// (the sender goes by its own estimate).
func (s *Sender) afterRound(now time.Duration, waiting bool) {
	legs := s.Legs()
	best := 0.0
	for _, l := range legs {
		if l.switchWaiting() >= s.t.cfg.PLIInterval {
			s.KeyFrame()
		}
		best = max(best, l.roomForSender())
	}
	if waiting {
		if st, err := s.t.cfg.Plane.StreamStats(s.cfg.From); err == nil && st.Waiting() > 0 {
			s.KeyFrame()
		}
	}
	s.mu.Lock()
	s.rooms.Span = senderRoomSpan
	if len(legs) == 0 {
		s.rooms.Reset() // nobody to tell of: none of the last room stands
	} else {
		s.rooms.Add(now, best)
		best, _ = s.rooms.Max()
	}
	s.mu.Unlock()
	// A simulcast sender is told nothing: a receiver takes the encoding
	// its link carries, and a REMB of the best link's room, which carries
	// one encoding, would have the sender stop its top encodings for every
	// receiver (its own estimate of its uplink governs what it sends).
	if best <= 0 || math.IsInf(best, 1) || len(s.ssrcs()) == 0 || s.simulcast() {
		return
	}
	s.mu.Lock()
	due := now-s.lastREMB >= time.Second || best < 0.9*s.rembSent
	if due {
		s.lastREMB, s.rembSent = now, best
	}
	s.mu.Unlock()
	if due {
		s.t.cfg.Log.Debug("remb to sender", "room", s.cfg.Room, "sender", s.cfg.ID, "kbps", int(best/1000))
		s.sendRTCP(&rtcp.ReceiverEstimatedMaximumBitrate{SenderSSRC: sfuSSRC, Bitrate: float32(best), SSRCs: s.ssrcs()})
	}
}

// feedbackSSRC is the media SSRC the sender's transport-cc feedback names:
// one it sends (libwebrtc drops feedback about an SSRC it does not know),
// its video's if it has one, an encoding's of a simulcast video.
func (s *Sender) feedbackSSRC() uint32 {
	if !s.simulcast() && s.cfg.VideoSSRC != 0 {
		return s.cfg.VideoSSRC
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.encodings) > 0 {
		return s.encodings[0].SSRC
	}
	for _, src := range s.cfg.Sources {
		if src.SSRC != 0 {
			return src.SSRC
		}
	}
	return 0
}

// simulcast says whether the sender's video is simulcast.
func (s *Sender) simulcast() bool {
	return slices.ContainsFunc(s.cfg.Sources, func(src dataplane.Source) bool { return src.Simulcast != nil })
}

// feedbackInterval is how often the sender is told what arrived.
const feedbackInterval = 100 * time.Millisecond

// transportFeedback sends the sender transport-cc feedback for what
// arrived since the last (the SFU is its peer: its own send-side
// estimate sees the uplink to the SFU).
func (s *Sender) transportFeedback(now time.Duration) {
	if s.recorder == nil || now-s.lastFB < feedbackInterval {
		return
	}
	s.lastFB = now
	media := s.feedbackSSRC()
	for _, a := range s.arrivals.Read() {
		s.recorder.Record(media, a.Seq, int64(a.At/time.Microsecond))
	}
	if pkts := s.recorder.BuildFeedbackPacket(); len(pkts) > 0 {
		s.sendRTCP(pkts...)
	}
}

func (s *Sender) ssrcs() []uint32 {
	out := make([]uint32, 0, len(s.cfg.Sources))
	for _, src := range s.cfg.Sources {
		if src.SSRC != 0 { // (a simulcast video's stand-in)
			out = append(out, src.SSRC)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.encodings {
		out = append(out, e.SSRC)
	}
	return out
}

func (s *Sender) status() []LegStatus {
	sent := map[netip.AddrPort]dataplane.Counter{}
	if st, err := s.t.cfg.Plane.StreamStats(s.cfg.From); err == nil {
		for _, r := range st.Out {
			sent[r.To] = r.Counter
		}
	}
	var out []LegStatus
	for _, l := range s.Legs() {
		st := l.status()
		st.Sent = sent[l.cfg.To]
		out = append(out, st)
	}
	return out
}

// SenderStatus is what a sender's stream carries, as rate control sees it.
type SenderStatus struct {
	Room, ID string
	// LayerBPS is each decode target's rate on the wire (a target includes
	// the layers below), OtherBPS the rest (audio); bits/s.
	LayerBPS []float64
	OtherBPS float64
}

func (s *Sender) senderStatus() SenderStatus {
	st := s.stream()
	return SenderStatus{Room: s.cfg.Room, ID: s.cfg.ID, LayerBPS: st.Rates, OtherBPS: st.Other}
}

func (s *Sender) String() string { return fmt.Sprintf("%s/%s", s.cfg.Room, s.cfg.ID) }
