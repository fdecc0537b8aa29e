package leg

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
)

// link is one receiver's downlink: its legs (one per sender it receives)
// share its estimate and allocation.
type link struct {
	t        *Table
	receiver string

	mu    sync.Mutex
	rc    *ratecontrol.Link
	legs  []*Leg
	last  []ratecontrol.Input // the last round's, for roomFor
	estBP float64
	estBy string
	// judged: when the last probe result logged was judged.
	judged time.Duration
	// lossSeen: when the link last showed loss (its estimator's, over the
	// last second), if lost.
	lossSeen time.Duration
	lost     bool
}

// lossyFor: a link that lost packets within this long and queues nothing
// now loses them at random (a radio, a lossy path), not to a queue.
const lossyFor = 5 * time.Second

// standingQueue: a link whose packets all waited this long over its
// lowest delay for a second holds a queue (a shaper's, full).
const standingQueue = 20 * time.Millisecond

// randomLoss says whether the link loses packets without queueing: it
// lost some within lossyFor, and neither does its delay grow (overuse)
// nor has it held a queue for the last second (a full queue shows no
// growth, only loss): a queue that overflows drops what a second copy
// would add to it.
func (k *link) randomLoss(now time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	est := k.rc.Estimator()
	return k.lost && now-k.lossSeen < lossyFor && est.Usage() != ratecontrol.Overuse && est.Queued() < standingQueue
}

func newLink(t *Table, receiver string) *link {
	return &link{t: t, receiver: receiver, rc: ratecontrol.NewLink()}
}

func (k *link) add(l *Leg) {
	k.mu.Lock()
	k.legs = append(k.legs, l)
	k.mu.Unlock()
}

func (k *link) remove(l *Leg) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if i := slices.Index(k.legs, l); i >= 0 {
		k.legs = slices.Delete(k.legs, i, i+1)
		k.rc.Forget(i)
		k.rc.ForgetLeg(l)
		if i < len(k.last) {
			k.last = slices.Delete(k.last, i, i+1)
		}
	}
}

func (k *link) empty() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.legs) == 0
}

func (k *link) feedback(l *Leg, now time.Duration, acks []ratecontrol.Ack) {
	k.t.cfg.AckLog.Acks(now, k.receiver, l.sender.cfg.ID, acks)
	k.mu.Lock()
	k.rc.OnFeedback(l, now, acks)
	if k.rc.Estimator().Loss() > 0 {
		k.lossSeen, k.lost = now, true
	}
	k.mu.Unlock()
}

func (k *link) rtt() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rc.Estimator().RTT()
}

func (k *link) retransmit(now time.Duration, bytes int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rc.Retransmit(now, bytes)
}

// retransmitFits says whether the budget has room for bytes now, without
// taking them.
func (k *link) retransmitFits(now time.Duration, bytes int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rc.RetransmitFits(now, bytes)
}

// round runs the link's rate control and applies its decisions.
func (k *link) round(now time.Duration) {
	k.mu.Lock()
	legs := slices.Clone(k.legs)
	k.mu.Unlock()
	in := make([]ratecontrol.Input, len(legs))
	for i, l := range legs {
		in[i] = l.input()
	}
	k.mu.Lock()
	if !slices.Equal(k.legs, legs) { // a leg came or went meanwhile: next round
		k.mu.Unlock()
		return
	}
	out, plan := k.rc.Round(now, in)
	k.last = in
	prev := k.estBP
	k.estBP, k.estBy, _ = k.rc.Estimate(in)
	est, by, usage, loss := k.estBP, k.estBy, k.rc.Estimator().Usage(), k.rc.Estimator().Loss()
	budget := k.rc.Budget()
	probe := k.rc.Estimator().LastProbe()
	newProbe := probe.At > k.judged
	k.judged = max(k.judged, probe.At)
	k.mu.Unlock()
	if newProbe {
		k.t.cfg.Log.Debug("probe judged", "receiver", k.receiver, "goal_kbps", int(probe.Goal/1000),
			"measured_kbps", int(probe.Measured/1000), "success", probe.Success, "full", probe.Full)
	}
	if prev == 0 && est > 0 || prev > 0 && (est < 0.8*prev || est > 1.25*prev) {
		k.t.cfg.Log.Debug("link estimate", "receiver", k.receiver, "kbps", int(est/1000), "source", by, "usage", usage, "loss", loss,
			"streams", streamsKbps(in))
	}
	moved := false
	for i, d := range out {
		moved = moved || d.Reason != ""
		legs[i].apply(d)
	}
	if moved { // what the switches were decided on
		targets := make([]string, len(out))
		for i, d := range out {
			targets[i] = legs[i].sender.cfg.ID + " " + targetName(d.Target)
		}
		k.t.cfg.Log.Debug("link allocation", "receiver", k.receiver, "kbps", int(est/1000), "source", by,
			"budget_kbps", int(budget/1000), "targets", strings.Join(targets, "; "), "streams", streamsKbps(in))
	}
	if plan != nil {
		legs[plan.Stream].startProbe(now, plan.Rate, plan.Length)
		k.t.cfg.Log.Debug("probe", "receiver", k.receiver, "goal_kbps", int(plan.Goal/1000), "padding_kbps", int(plan.Rate/1000),
			"length", plan.Length)
	}
}

// streamsKbps says what each stream's targets cost, for the logs.
func streamsKbps(in []ratecontrol.Input) string {
	var b strings.Builder
	for i, s := range in {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "other %.0f, targets", s.Other/1000)
		for _, r := range s.Rates {
			fmt.Fprintf(&b, " %.0f", r/1000)
		}
	}
	return b.String()
}

// pace sends what the link's probe owes, or stops it once the link
// queues under it.
func (k *link) pace(now time.Duration) {
	k.mu.Lock()
	legs, padding := slices.Clone(k.legs), k.rc.Padding()
	k.mu.Unlock()
	for _, l := range legs {
		l.pace(now, padding)
	}
}

// estimate is the link's last estimate and its source.
func (k *link) estimate() (float64, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.estBP, k.estBy
}

// roomFor is what the link has room for of l's stream: its estimate less
// what its other streams take at their targets; +Inf while the link has
// shown no limit (an estimate from what it takes would hold the sender to
// what it sends now, and a receiver that takes it all is its best
// downlink).
func (k *link) roomFor(l *Leg) float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.estBP <= 0 || len(k.last) != len(k.legs) {
		return math.Inf(1)
	}
	room := k.estBP
	for i, other := range k.legs {
		if other != l {
			room -= k.last[i].Cost(other.currentTarget())
		}
	}
	return room
}
