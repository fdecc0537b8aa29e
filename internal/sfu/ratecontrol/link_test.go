package ratecontrol

import (
	"testing"
	"time"
)

// Two senders' streams to one receiver: L1T3 video at 60, 120 and 240
// kbit/s per target, and 40 kbit/s of audio each.
func twoStreams() []Input {
	s := Stream{Rates: []float64{60e3, 120e3, 240e3}, Other: 40e3}
	return []Input{{Stream: s, CanProbe: true}, {Stream: s, CanProbe: true}}
}

// linkSim runs a Link in a closed loop over a simulated downlink: every
// 250 ms a round sets the targets, each stream's leg sends what its
// target costs (and its feedback comes on its own), and a planned probe's
// padding goes on the probing leg for ProbeLength.
type linkSim struct {
	t       *testing.T
	link    *Link
	sender  *simSender
	in      []Input
	targets []int
	padding float64
	padLeg  int
	padEnd  time.Duration
	moves   []string
	now     time.Duration
}

func newLinkSim(t *testing.T, rate func(time.Duration) float64) *linkSim {
	l := NewLink()
	in := twoStreams()
	sender := newSimSender(newSimLink(rate, len(in)), l.Estimator())
	sender.onAcks = func(leg int, now time.Duration, acks []Ack) { l.OnFeedback(leg, now, acks) }
	return &linkSim{t: t, link: l, sender: sender, in: in, targets: []int{EveryLayer, EveryLayer}}
}

func (s *linkSim) run(d time.Duration) {
	rates := func(now time.Duration) []float64 {
		out := make([]float64, len(s.in))
		for i, in := range s.in {
			out[i] = in.cost(s.targets[i])
		}
		if now < s.padEnd {
			out[s.padLeg] += s.padding
		}
		return out
	}
	s.sender.runLegs(s.now, s.now+d, rates, func(now time.Duration) {
		out, plan := s.link.Round(now, s.in)
		for i, d := range out {
			if d.Reason != "" {
				s.moves = append(s.moves, d.Reason)
			}
			s.targets[i] = d.Target
		}
		if plan != nil {
			s.padding, s.padLeg, s.padEnd = plan.Rate, plan.Stream, now+ProbeLength
		}
	})
	s.now += d
}

// The link narrows to 300 kbit/s: within two seconds both streams fit it
// (video at a lower layer, audio whole); it clears: within ten seconds
// both are back at the top, through probes; at 200 kbit/s one stream's
// video pauses and the other keeps its lowest layer.
func TestLinkFollowsItsEstimate(t *testing.T) {
	capacity := 2e6
	s := newLinkSim(t, func(time.Duration) float64 { return capacity })
	s.run(5 * time.Second)
	if s.targets[0] != EveryLayer || s.targets[1] != EveryLayer {
		t.Fatalf("on a wide link: targets %v, want both as they are", s.targets)
	}
	capacity = 300e3
	s.run(2 * time.Second)
	total := Total([]Stream{s.in[0].Stream, s.in[1].Stream}, s.targets)
	if total > capacity || s.targets[0] == Paused || s.targets[1] == Paused {
		t.Errorf("2 s after the link narrowed to 300 kbit/s: targets %v (%.0f kbit/s)", s.targets, total/1000)
	}
	s.run(8 * time.Second)
	total = Total([]Stream{s.in[0].Stream, s.in[1].Stream}, s.targets)
	if total > capacity || total < 0.5*capacity {
		t.Errorf("settled at targets %v (%.0f kbit/s) on a 300 kbit/s link", s.targets, total/1000)
	}
	capacity = 2e6
	var back time.Duration = -1
	for step := range 40 {
		s.run(250 * time.Millisecond)
		if s.targets[0] == 2 && s.targets[1] == 2 {
			back = time.Duration(step+1) * 250 * time.Millisecond
			break
		}
	}
	if back < 0 || back > 10*time.Second {
		t.Errorf("back at the top after %v (targets %v), want within 10 s", back, s.targets)
	}
	capacity = 200e3
	s.run(6 * time.Second)
	paused := 0
	for _, tg := range s.targets {
		if tg == Paused {
			paused++
		}
	}
	if paused != 1 {
		t.Errorf("at 200 kbit/s: targets %v, want one stream paused and one at its lowest", s.targets)
	}
	t.Logf("back at the top after %v; %d moves; %d packets dropped by the link", back, len(s.moves), s.sender.link.dropped)
	for _, m := range s.moves {
		t.Log(m)
	}
}

// The allocation serves audio first, then every stream its lowest layer
// (those showing video first), then one layer more each in turn.
func TestAllocate(t *testing.T) {
	s := Stream{Rates: []float64{60e3, 120e3, 240e3}, Other: 40e3}
	for _, c := range []struct {
		budget float64
		cur    []int
		want   []int
	}{
		{1e6, []int{0, 0}, []int{2, 2}},
		{400e3, []int{0, 0}, []int{1, 1}},
		{460e3, []int{0, 0}, []int{2, 1}},
		{260e3, []int{0, 0}, []int{1, 0}},
		{150e3, []int{0, 0}, []int{0, Paused}},
		{150e3, []int{Paused, 1}, []int{Paused, 0}},
		{70e3, []int{1, 1}, []int{Paused, Paused}},
	} {
		got := Allocate(c.budget, []Stream{{Rates: s.Rates, Other: s.Other, Current: c.cur[0]}, {Rates: s.Rates, Other: s.Other, Current: c.cur[1]}})
		if got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("budget %.0f, now %v: %v, want %v", c.budget, c.cur, got, c.want)
		}
	}
	if got := Allocate(10e3, []Stream{{Full: 300e3}}); got[0] != EveryLayer {
		t.Errorf("a stream that cannot be adapted: %v", got)
	}
}
