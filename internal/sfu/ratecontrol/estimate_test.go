package ratecontrol

import (
	"testing"
	"time"
)

func constant(bps float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return bps }
}

// On a link wider than what is sent, nothing looks like congestion, and
// the estimator claims no limit (one from what is sent would be what a
// sender ramps through); a probe shows what the link carries.
func TestEstimateOnAWideLink(t *testing.T) {
	s := newSimSender(newSimLink(constant(2e6), 1), NewEstimator())
	s.run(0, 10*time.Second, constant(400e3), nil)
	if est, ok := s.est.Estimate(); ok {
		t.Errorf("estimate %.0f on an uncongested link", est)
	}
	if s.est.Usage() == Overuse || s.link.dropped > 0 || s.est.Loss() > 0 {
		t.Errorf("usage %v, %d dropped, loss %.2f", s.est.Usage(), s.link.dropped, s.est.Loss())
	}
}

// A link that narrows under what is sent shows within about a second: the
// estimate falls to what the link carries or below, and, the sender
// keeping under it, settles there (not lower: loss is what overfilling
// caused, and ends with it).
func TestEstimateFollowsALinkNarrowing(t *testing.T) {
	link := 1e6
	s := newSimSender(newSimLink(func(time.Duration) float64 { return link }, 1), NewEstimator())
	send := 600e3
	rate := func(time.Duration) float64 { return send }
	adapt := func(time.Duration) {
		if est, ok := s.est.Estimate(); ok {
			send = min(600e3, 0.9*est)
		}
	}
	s.run(0, 5*time.Second, rate, adapt)
	before, _ := s.est.Estimate()
	link = 300e3
	var below time.Duration = -1
	var low float64 = 1e9
	s.run(5*time.Second, 15*time.Second, rate, func(now time.Duration) {
		adapt(now)
		est, ok := s.est.Estimate()
		if below < 0 && ok && est <= link {
			below = now - 5*time.Second
		}
		if now > 8*time.Second {
			low = min(low, est)
		}
	})
	after, _ := s.est.Estimate()
	t.Logf("estimate %.0f before, %.0f after (lowest after 3 s %.0f); under the link's %.0f after %v; %d dropped", before, after, low, link, below, s.link.dropped)
	if below < 0 || below > 1500*time.Millisecond {
		t.Errorf("the estimate reached the narrowed link's rate after %v, want within 1.5 s", below)
	}
	if after > 1.2*link || low < 0.6*link {
		t.Errorf("estimate %.0f (lowest %.0f) on a %.0f link", after, low, link)
	}
}

// A probe at a rate the link carries succeeds and raises the estimate to
// it; one above what it carries fails, and measures what it carries.
func TestProbe(t *testing.T) {
	for _, c := range []struct {
		link, goal float64
		success    bool
	}{{1e6, 600e3, true}, {400e3, 800e3, false}} {
		s := newSimSender(newSimLink(constant(c.link), 1), NewEstimator())
		s.run(0, 3*time.Second, constant(200e3), nil)
		before, _ := s.est.Estimate()
		from := 3 * time.Second
		until := from + 500*time.Millisecond
		s.est.Probe(from, until, c.goal, 200e3)
		s.run(from, until, constant(c.goal), nil)
		s.run(until, until+2*time.Second, constant(200e3), nil)
		r := s.est.LastProbe()
		after, _ := s.est.Estimate()
		t.Logf("link %.0f, goal %.0f: %+v; estimate %.0f -> %.0f", c.link, c.goal, r, before, after)
		if r.Success != c.success || r.Measured <= 0 {
			t.Errorf("link %.0f, probe at %.0f: %+v", c.link, c.goal, r)
		}
		if c.success && after < 0.9*c.goal {
			t.Errorf("a successful probe left the estimate at %.0f", after)
		}
		if !c.success && (r.Measured > 1.05*c.link || r.Measured < 0.7*c.link) {
			t.Errorf("a failed probe measured %.0f on a %.0f link", r.Measured, c.link)
		}
	}
}

// A probe over a shaper (tbf: an 8 kB bucket, 200 ms of queue) stops
// once it has queued 50 ms, long before the queue drops the media that
// shares it, and measures the shaper's rate from what its queue drained
// at; the same probe without the stop overfills the queue.
func TestProbeStopsAtItsQueue(t *testing.T) {
	for _, stop := range []bool{true, false} {
		link := newSimLink(constant(300e3), 1)
		link.burst = 8192
		s := newSimSender(link, NewEstimator())
		s.run(0, 3*time.Second, constant(200e3), nil)
		from, until := 3*time.Second, 4*time.Second
		s.est.Probe(from, until, 500e3, 200e3)
		s.run(from, until, func(time.Duration) float64 {
			if stop && s.est.ProbeQueueing() {
				return 200e3
			}
			return 500e3
		}, nil)
		s.run(until, until+2*time.Second, constant(200e3), nil)
		r := s.est.LastProbe()
		t.Logf("stop %v: %+v, %d of %d dropped", stop, r, link.dropped, link.sent)
		if stop && (r.Success || r.Measured < 0.85*300e3 || r.Measured > 1.05*300e3 || link.dropped > 0) {
			t.Errorf("a probe at 500 kbit/s over a 300 kbit/s shaper: %+v, %d packets dropped", r, link.dropped)
		}
		if !stop && link.dropped == 0 {
			t.Errorf("without the stop nothing was dropped: the test shows nothing")
		}
	}
}
