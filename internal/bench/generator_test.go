package bench

import (
	"math"
	"testing"
)

func TestHistogramQuantiles(t *testing.T) {
	h := newHistogram()
	for us := 1; us <= 100; us++ {
		h.add(uint64(us) * 1000)
	}
	h.add(50_000_000) // 50 ms: coarse bucket
	if got := h.Quantile(0.5); got < 50 || got > 52 {
		t.Errorf("p50 %v µs, want about 51", got)
	}
	if got := h.Quantile(0.99); got < 99 || got > 101 {
		t.Errorf("p99 %v µs, want about 100", got)
	}
	if got := h.Quantile(1); got < 50000 || got > 50100 {
		t.Errorf("p100 %v µs, want about 50000", got)
	}
	xs, ys := h.CDF()
	if len(xs) != 101 || ys[len(ys)-1] != 1 {
		t.Errorf("cdf: %d points ending at %v", len(xs), ys[len(ys)-1])
	}
	other := newHistogram()
	other.add(2000)
	h.merge(other)
	if h.count != 102 || h.max != 50_000_000 {
		t.Errorf("merge: count %d max %d", h.count, h.max)
	}
}

// RFC 3550 6.4.1: constant transit time gives zero jitter; a transit time
// alternating by D converges to D.
func TestJitterRFC3550(t *testing.T) {
	var j jitter
	for i := range 100 {
		j.update(uint64(i)*20e6, uint64(i)*20e6+1e6)
	}
	if j.value() != 0 {
		t.Fatalf("constant delay: jitter %v", j.value())
	}
	var k jitter
	for i := range 2000 {
		extra := uint64(0)
		if i%2 == 1 {
			extra = 100_000 // 100 µs
		}
		k.update(uint64(i)*20e6, uint64(i)*20e6+1e6+extra)
	}
	if math.Abs(k.value()-100_000) > 1000 {
		t.Fatalf("alternating 100 µs: jitter %v ns", k.value())
	}
}
