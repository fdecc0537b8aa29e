package sfu

import (
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The judge's count of streams P3 must play follows what the link
// carries: both, but while P1 sends L1T2 (and restructuredGrace after its
// switch back) one, where L1T2's lowest layer no longer fits beside the
// other's; a pause of P1 outside that span counts against the SFU.
func TestPlayingAsTheLinkCarries(t *testing.T) {
	start := time.UnixMilli(0)
	fit := &fitting{streams: 2, restructured: 1}
	series := func(pausedFrom, pausedTo time.Duration) testbed.Phase {
		ph := testbed.Phase{Samples: make([][]testbed.PageSample, 3)}
		for at := 8 * time.Second; at < 24*time.Second; at += time.Second {
			ph.Samples[2] = append(ph.Samples[2], testbed.PageSample{T: at.Milliseconds(),
				Paused: map[string]bool{"p1": at >= pausedFrom && at < pausedTo, "p2": false}})
		}
		return ph
	}
	need := fit.need
	if got := series(12*time.Second, 21*time.Second).PlayingAsCarried(2, []string{"p1", "p2"}, start, need); got != 1 {
		t.Errorf("P1 paused 12-21 s, in L1T2's span: %.2f of the samples as carried, want all", got)
	}
	if got := series(4*time.Second, 21*time.Second).PlayingAsCarried(2, []string{"p1", "p2"}, start, need); got != 14.0/16 {
		t.Errorf("P1 paused 4-21 s: %.2f of the samples as carried, want the 2 s before L1T2 short (14 of 16)", got)
	}
	fit.restructured = 2
	if got := series(12*time.Second, 21*time.Second).PlayingAsCarried(2, []string{"p1", "p2"}, start, need); got != 7.0/16 {
		t.Errorf("P1 paused 12-21 s where L1T2 fits too: %.2f of the samples as carried, want 7 of 16", got)
	}
}
