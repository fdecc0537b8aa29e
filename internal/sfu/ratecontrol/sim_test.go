package ratecontrol

import (
	"time"

	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/rtcp"
)

// simLink is a receiver's downlink as tbf makes it: a token bucket of
// rate bits/s holding up to burst bytes (a packet that finds tokens goes
// at once) feeding a queue of at most limit of delay and the bucket's
// bytes, as tbf's latency sets its limit (tail drop), then a fixed
// propagation delay. Packets come from one or more legs (each a
// PeerConnection with its own transport-wide numbers); the receiver
// records each leg's arrivals with pion/interceptor's transport-cc
// recorder (an implementation of the feedback independent of ours) and
// sends each leg's feedback every 100 ms, the legs out of phase,
// which reaches the sender after the propagation delay. Times are the
// simulation's.
type simLink struct {
	rate        func(now time.Duration) float64
	limit, prop time.Duration
	burst       float64 // bytes

	busyUntil time.Duration // the bottleneck transmits the queue until then
	tokens    float64       // bytes in the bucket at busyUntil
	inflight  []simArrival
	feedback  []simFeedback
	legs      []*simLeg
	sent      int
	dropped   int
	// The media's packets (not a probe's padding): what a loss is
	// counted in.
	sentMedia, droppedMedia int
}

type simLeg struct {
	rec    *twcc.Recorder
	sent   map[uint16]SentPacket
	seq    uint16
	nextFB time.Duration
}

type simArrival struct {
	at  time.Duration
	leg int
	seq uint16
}

type simFeedback struct {
	at  time.Duration
	leg int
	pkt *rtcp.TransportLayerCC
}

func newSimLink(rate func(time.Duration) float64, legs int) *simLink {
	l := &simLink{rate: rate, limit: 200 * time.Millisecond, prop: 20 * time.Millisecond}
	for i := range legs {
		l.legs = append(l.legs, &simLeg{rec: twcc.NewRecorder(1), sent: map[uint16]SentPacket{},
			nextFB: 100*time.Millisecond + time.Duration(i)*37*time.Millisecond})
	}
	return l
}

// send puts a packet of size bytes of leg on the link at now.
func (l *simLink) send(now time.Duration, leg, size int) {
	lg := l.legs[leg]
	seq := lg.seq
	lg.seq++
	lg.sent[seq] = SentPacket{At: now, Size: size}
	l.sent++
	media := size != paddingSize
	if media {
		l.sentMedia++
	}
	start := max(now, l.busyUntil)
	// The queue holds what tbf's latency makes its limit: rate times
	// latency, and the bucket (tc's q_tbf.c).
	rate := l.rate(now) / 8 // bytes/s
	if backlog := rate * (start - now).Seconds(); backlog+float64(size) > rate*l.limit.Seconds()+l.burst {
		l.dropped++
		if media {
			l.droppedMedia++
		}
		return // the queue is full
	}
	// Tokens gathered since the last packet left, up to the bucket.
	tokens := min(l.burst, l.tokens+rate*(start-l.busyUntil).Seconds())
	if tokens >= float64(size) {
		l.tokens, l.busyUntil = tokens-float64(size), start
	} else {
		l.tokens = 0
		l.busyUntil = start + time.Duration((float64(size)-tokens)/rate*float64(time.Second))
	}
	l.inflight = append(l.inflight, simArrival{at: l.busyUntil + l.prop, leg: leg, seq: seq})
}

// step moves the receiver to now: what arrived is recorded, feedback due
// is sent; it returns the feedback that reached the sender by now.
func (l *simLink) step(now time.Duration) []simFeedback {
	kept := l.inflight[:0]
	for _, a := range l.inflight {
		if a.at <= now {
			l.legs[a.leg].rec.Record(1, a.seq, int64(a.at/time.Microsecond))
		} else {
			kept = append(kept, a)
		}
	}
	l.inflight = kept
	for i, lg := range l.legs {
		for now >= lg.nextFB {
			for _, p := range lg.rec.BuildFeedbackPacket() {
				if fb, ok := p.(*rtcp.TransportLayerCC); ok {
					l.feedback = append(l.feedback, simFeedback{at: lg.nextFB + l.prop, leg: i, pkt: fb})
				}
			}
			lg.nextFB += 100 * time.Millisecond
		}
	}
	var out []simFeedback
	kept2 := l.feedback[:0]
	for _, f := range l.feedback {
		if f.at <= now {
			out = append(out, f)
		} else {
			kept2 = append(kept2, f)
		}
	}
	l.feedback = kept2
	return out
}

func (l *simLink) lookup(leg int) func(uint16) (SentPacket, bool) {
	return func(seq uint16) (SentPacket, bool) {
		s, ok := l.legs[leg].sent[seq]
		return s, ok
	}
}

// simSender sends on each leg at a rate (packets of about 1,000 bytes)
// and feeds what comes back to onAcks (per leg), or to the estimator. A
// probe's padding (padding, if set) goes as the SFU sends it: packets of
// 255 bytes, paced.
type simSender struct {
	link        *simLink
	est         *Estimator
	onAcks      func(leg int, now time.Duration, acks []Ack) // instead of est.OnAcks, if set
	padding     func(now time.Duration) (leg int, rate float64)
	readers     []FeedbackReader
	owed        []float64 // bits to send, per leg
	paddingOwed float64
}

// paddingSize is a padding packet's size on the wire, bytes (leg/rtx.go:
// 255 bytes of padding in an RTX packet).
const paddingSize = 255 + 12 + 8 + 28

func newSimSender(link *simLink, est *Estimator) *simSender {
	return &simSender{link: link, est: est, readers: make([]FeedbackReader, len(link.legs)), owed: make([]float64, len(link.legs))}
}

// run simulates [from, until) in 1 ms steps, leg i sending at rate(now)[i]
// bits/s (one leg: rate's first), calling each (if set) every 250 ms.
func (s *simSender) run(from, until time.Duration, rate func(time.Duration) float64, each func(now time.Duration)) {
	s.runLegs(from, until, func(now time.Duration) []float64 { return []float64{rate(now)} }, each)
}

func (s *simSender) runLegs(from, until time.Duration, rates func(time.Duration) []float64, each func(now time.Duration)) {
	for now := from; now < until; now += time.Millisecond {
		for leg, r := range rates(now) {
			s.owed[leg] += r / 1000
			for s.owed[leg] >= 8*1000 {
				s.link.send(now, leg, 1000)
				s.owed[leg] -= 8 * 1000
			}
		}
		if s.padding != nil {
			leg, r := s.padding(now)
			s.paddingOwed += r / 1000
			if r == 0 {
				s.paddingOwed = 0
			}
			for s.paddingOwed >= 8*paddingSize {
				s.link.send(now, leg, paddingSize)
				s.paddingOwed -= 8 * paddingSize
			}
		}
		for _, fb := range s.link.step(now) {
			acks := s.readers[fb.leg].Acks(fb.pkt, s.link.lookup(fb.leg))
			if s.onAcks != nil {
				s.onAcks(fb.leg, now, acks)
			} else {
				s.est.OnAcks(now, acks)
			}
		}
		if each != nil && (now-from)%(250*time.Millisecond) == 0 {
			each(now)
		}
	}
}
