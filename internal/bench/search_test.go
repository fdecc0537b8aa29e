package bench

import (
	"context"
	"testing"
)

// The rate search doubles to the first failure, then bisects to within 5%
// of the limit; it stops where a trial says so, and at the maximum.
func TestRateSearch(t *testing.T) {
	run := func(limit, maxRate float64, stopAt float64) (best float64, trials int) {
		err := RateSearch(context.Background(), 1000, maxRate, 20, func(rate float64) (bool, bool, error) {
			trials++
			pass := rate <= limit
			if pass {
				best = max(best, rate)
			}
			return pass, stopAt > 0 && rate >= stopAt, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return best, trials
	}
	if best, n := run(37000, 200000, 0); best > 37000 || best < 0.95*37000 || n > 12 {
		t.Errorf("limit 37,000: best %.0f after %d trials", best, n)
	}
	if best, n := run(1e9, 200000, 0); best != 200000 || n != 9 { // 1k..128k doubling, then the maximum
		t.Errorf("no limit: best %.0f after %d trials", best, n)
	}
	if _, n := run(1e9, 200000, 4000); n != 3 {
		t.Errorf("a trial that says stop at 4,000: %d trials", n)
	}
}
