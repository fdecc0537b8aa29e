package ratelimit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestFromBitrate(t *testing.T) {
	for _, bps := range []uint64{1, 7, MaxBitrate + 1} {
		if _, err := FromBitrate(bps); err == nil {
			t.Errorf("%d bit/s accepted", bps)
		}
	}
	l, err := FromBitrate(800_000)
	if err != nil || l.Rate != 100_000 || l.Burst != 20_000*uint64(time.Second) {
		t.Errorf("800 kbit/s: %+v %v, want 100 kB/s and a 20 kB bucket", l, err)
	}
	if l, _ := FromBitrate(8000); l.Burst != minBurstBytes*uint64(time.Second) {
		t.Errorf("8 kbit/s: bucket %d, want the %d-byte minimum", l.Burst/uint64(time.Second), minBurstBytes)
	}
	if l, err := FromBitrate(0); err != nil || l.Enabled() {
		t.Errorf("0: %+v %v, want no limit", l, err)
	}
}

// The bucket against a model in floating point: random sizes at random
// times, the same verdicts (away from the exact boundary), and over time
// the rate plus the bucket's depth, never more.
func TestBucketMatchesModel(t *testing.T) {
	l, _ := FromBitrate(8_000_000) // 1 MB/s, 200 kB deep
	var b Bucket
	rng := rand.New(rand.NewPCG(1, 2))
	rate, depth := float64(l.Rate), float64(l.Burst)/1e9
	tokens, last := depth, 0.0
	now := uint64(1)
	passed := 0.0
	for range 100_000 {
		now += uint64(rng.IntN(2_000_000)) // up to 2 ms between datagrams
		n := 1 + rng.IntN(1500)
		sec := float64(now) / 1e9
		if last != 0 {
			tokens = math.Min(depth, tokens+(sec-last)*rate)
		}
		last = sec
		want := tokens >= float64(n)
		got := b.Take(l, n, now)
		if math.Abs(tokens-float64(n)) > 1 && got != want {
			t.Fatalf("at %v: %d bytes with %.1f tokens: took %v, want %v", sec, n, tokens, got, want)
		}
		if got {
			tokens -= float64(n)
			passed += float64(n)
		}
	}
	if limit := rate*float64(now)/1e9 + depth; passed > limit {
		t.Errorf("%.0f bytes passed in %.1f s, more than the limit allows (%.0f)", passed, float64(now)/1e9, limit)
	}
}

func TestPerSecond(t *testing.T) {
	l := PerSecond(2, 6)
	var b Bucket
	for i := range 6 {
		if !b.Take(l, 1, uint64(1+i)) {
			t.Fatalf("event %d of the burst refused", i)
		}
	}
	if b.Take(l, 1, 10) {
		t.Fatal("7th event at once accepted")
	}
	if !b.Take(l, 1, 10+uint64(time.Second/2)) {
		t.Fatal("not refilled after half a second at 2/s")
	}
}
