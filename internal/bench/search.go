package bench

import "context"

// RateSearch runs trial at rates doubling from start (up to maxRate) until
// one fails, then bisects between the highest pass and the lowest failure
// until they are within 5%, for at most steps trials (RFC 2544 section
// 26.1). trial says whether the rate passed, and whether to stop there
// (the sender fell short).
func RateSearch(ctx context.Context, start, maxRate float64, steps int, trial func(rate float64) (pass, stop bool, err error)) error {
	lo, hi := 0.0, 0.0 // highest passing, lowest failing (0: none yet)
	rate := start
	for range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		pass, stop, err := trial(rate)
		if err != nil || stop {
			return err
		}
		if pass {
			lo = rate
		} else {
			hi = rate
		}
		if hi == 0 {
			if lo == maxRate {
				return nil
			}
			rate = min(2*rate, maxRate)
			continue
		}
		if hi-lo <= 0.05*max(lo, 1) {
			return nil
		}
		rate = (lo + hi) / 2
	}
	return nil
}
