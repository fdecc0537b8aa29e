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
		s.run(from, until, constant(ProbeRate(c.goal, until-from)), nil)
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

// A probe over a shaper whose rate is a little under what it sends
// (tbf, an 8 kB bucket full as the probe starts: the media took less than
// the shaper) shows no more than the shaper's rate, though a one-second
// probe's excess does not drain the bucket by its end and its second half
// arrives as fast as it was sent ("probe showed 416 kbit/s" on a 359
// kbit/s shaper, in a TestShapedReceiver run). Sent at ProbeRate, a probe
// on a wide link shows its goal; far over the shaper, the shaper's rate;
// a little over the shaper, a success where the shaper carries what the
// goal was to show (its queue, a full link's, measures it).
func TestProbeThroughABucket(t *testing.T) {
	for _, c := range []struct {
		link, goal, send float64
		length           time.Duration
	}{
		{359e3, 385e3, 385e3, time.Second}, {359e3, 385e3, 385e3, 3 * time.Second}, {340e3, 385e3, 385e3, time.Second},
		{359e3, 385e3, ProbeRate(385e3, time.Second), time.Second}, {190e3, 385e3, ProbeRate(385e3, time.Second), time.Second},
		{2e6, 385e3, ProbeRate(385e3, time.Second), time.Second}, {2e6, 385e3, ProbeRate(385e3, 3*time.Second), 3 * time.Second},
		// Sent at ProbeRate for a goal a little over the shaper (what it
		// was to show, the goal less measureMargin, under it).
		{359e3, 370e3, ProbeRate(370e3, time.Second), time.Second}, {226e3, 232e3, ProbeRate(232e3, time.Second), time.Second},
	} {
		link := newSimLink(constant(c.link), 1)
		link.burst = 8192
		s := newSimSender(link, NewEstimator())
		media := min(300e3, 0.85*c.link)
		s.run(0, 3*time.Second, constant(media), nil)
		from, until := 3*time.Second, 3*time.Second+c.length
		s.est.Probe(from, until, c.goal, media)
		s.run(from, until, func(time.Duration) float64 {
			if s.est.ProbeQueueing() {
				return media
			}
			return c.send
		}, nil)
		s.run(until, until+2*time.Second, constant(media), nil)
		r := s.est.LastProbe()
		t.Logf("link %.0f, sent at %.0f for %.0f over %v: %+v", c.link/1000, c.send/1000, c.goal/1000, c.length, r)
		if r.Measured > 1.03*c.link {
			t.Errorf("a probe sent at %.0f kbit/s over %v on a %.0f kbit/s shaper showed %.0f", c.send/1000, c.length, c.link/1000, r.Measured/1000)
		}
		if c.link > 2*c.goal && (!r.Success || r.Measured < 0.95*c.goal) {
			t.Errorf("a probe for %.0f kbit/s on a wide link: %+v", c.goal/1000, r)
		}
		if c.send >= ProbeRate(c.goal, c.length) && c.link >= c.goal/measureMargin && !r.Success {
			t.Errorf("a probe for %.0f kbit/s, sent at ProbeRate, on a %.0f kbit/s shaper (what it was to show, %.0f, under it) failed: %+v",
				c.goal/1000, c.link/1000, c.goal/measureMargin/1000, r)
		}
		if c.link < 0.9*c.goal && r.Success {
			t.Errorf("a probe for %.0f kbit/s on a %.0f kbit/s shaper succeeded: %+v", c.goal/1000, c.link/1000, r)
		}
	}
}

// A probe over a shaper (tbf: an 8 kB bucket, latency 200ms) stops
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

// Queued is the queue a link held all through the last second: none on a
// link at its base delay, the extra delay of one whose every packet waited
// (a shaper's full queue, which shows no growth), none again once one
// packet went through at the base delay.
func TestQueuedIsAStandingQueue(t *testing.T) {
	e := NewEstimator()
	var seq uint16
	feed := func(from, until, oneWay time.Duration) {
		for at := from; at < until; at += 10 * time.Millisecond {
			e.OnAcks(at+oneWay, []Ack{{Seq: seq, Sent: at, Size: 1200, Received: true, Arrived: at + oneWay + time.Hour}})
			seq++
		}
	}
	feed(0, 2*time.Second, 5*time.Millisecond)
	if q := e.Queued(); q != 0 {
		t.Errorf("at the base delay: queued %v, want 0", q)
	}
	feed(2*time.Second, 4*time.Second, 60*time.Millisecond)
	if q := e.Queued(); q != 55*time.Millisecond {
		t.Errorf("every packet 55 ms over the base for 2 s: queued %v", q)
	}
	feed(4*time.Second, 4100*time.Millisecond, 5*time.Millisecond)
	if q := e.Queued(); q != 0 {
		t.Errorf("packets at the base delay again: queued %v, want 0", q)
	}
}
