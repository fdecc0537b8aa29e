package leg

import (
	"math"
	"slices"
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
	k.mu.Lock()
	k.rc.OnFeedback(l, now, acks)
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
	if len(k.legs) != len(legs) { // a leg came or went meanwhile: next round
		k.mu.Unlock()
		return
	}
	out, plan := k.rc.Round(now, in)
	k.last = in
	k.estBP, k.estBy, _ = k.rc.Estimate(in)
	k.mu.Unlock()
	for i, d := range out {
		legs[i].apply(d)
	}
	if plan != nil {
		legs[plan.Stream].startProbe(now, plan.Rate)
		k.t.cfg.Log.Debug("probe", "receiver", k.receiver, "goal_kbps", int(plan.Goal/1000), "padding_kbps", int(plan.Rate/1000))
	}
}

func (k *link) pace(now time.Duration) {
	k.mu.Lock()
	legs := slices.Clone(k.legs)
	k.mu.Unlock()
	for _, l := range legs {
		l.pace(now)
	}
}

// estimate is the link's last estimate and its source.
func (k *link) estimate() (float64, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.estBP, k.estBy
}

// roomFor is what the link has room for of l's stream: its estimate less
// what its other streams take at their targets. A link that has shown no
// limit yet has room for half as much again as it takes (as a receiver's
// own REMB says: senders ramp up through it, as they would to a browser);
// +Inf before it has taken anything.
func (k *link) roomFor(l *Leg) float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.last) != len(k.legs) {
		return math.Inf(1)
	}
	room := k.estBP
	if room <= 0 {
		acked := k.rc.Estimator().Acked()
		if acked <= 0 {
			return math.Inf(1)
		}
		room = 1.5*acked + 10e3
	}
	for i, other := range k.legs {
		if other != l {
			room -= k.last[i].Cost(other.currentTarget())
		}
	}
	return room
}
