package speakers

import (
	"slices"
	"testing"
	"time"
)

const round = 250 * time.Millisecond

// rounds feeds the ranking d of rounds (250 ms) of these loudnesses,
// returning the dominant speaker after each.
func rounds(r *Ranking, now *time.Duration, d time.Duration, loud map[string]float64) []string {
	var out []string
	for end := *now + d; *now < end; *now += round {
		for id, l := range loud {
			r.Observe(*now, id, l)
		}
		r.Decide(*now)
		out = append(out, r.Dominant())
	}
	return out
}

// The first to speak takes the room at once; another, louder, takes it
// only once it has been so for Hold (a word said over the speaker does
// not); one who stops speaking gives way after Hold to one who speaks;
// silence and a room's noise never speak; the order for last-N is by
// being dominant last, then by joining, never the receiver's own.
func TestRanking(t *testing.T) {
	r := New()
	var now time.Duration
	quiet, noise, speech, loud := 0.0, 127.0-75, 127.0-35, 127.0-25
	got := rounds(r, &now, time.Second, map[string]float64{"a": quiet, "b": noise, "c": quiet})
	if r.Dominant() != "" {
		t.Fatalf("dominant %q in silence and noise", r.Dominant())
	}
	got = rounds(r, &now, time.Second, map[string]float64{"a": speech, "b": noise, "c": quiet})
	if got[len(got)-1] != "a" || got[0] != "" && got[0] != "a" {
		t.Fatalf("a speaking alone: dominant %v", got)
	}
	// b says a word over a, louder, for half a second.
	rounds(r, &now, 500*time.Millisecond, map[string]float64{"a": speech, "b": loud, "c": quiet})
	got = rounds(r, &now, time.Second, map[string]float64{"a": speech, "b": noise, "c": quiet})
	if slices.Contains(got, "b") {
		t.Errorf("a word said over the speaker took the room: %v", got)
	}
	// b speaks on, louder: it takes the room after Hold, not before.
	got = rounds(r, &now, 2*time.Second, map[string]float64{"a": speech, "b": loud, "c": quiet})
	first := slices.Index(got, "b")
	if first < 0 || time.Duration(first+1)*round < Hold || got[len(got)-1] != "b" {
		t.Errorf("b speaking louder for 2 s: dominant %v, want b after %v", got, Hold)
	}
	if rec := r.Recent(2, "x"); !slices.Equal(rec, []string{"b", "a"}) {
		t.Errorf("recent 2: %v, want b then a", rec)
	}
	if rec := r.Recent(3, "b"); !slices.Equal(rec, []string{"a", "c"}) {
		t.Errorf("recent 3 for b: %v, want a then c (never dominant), never b itself", rec)
	}
	// b stops; c speaks (softer than b was): c after Hold.
	got = rounds(r, &now, 3*time.Second, map[string]float64{"a": quiet, "b": quiet, "c": speech})
	if got[len(got)-1] != "c" || got[0] == "c" {
		t.Errorf("b stopped and c speaks: %v", got)
	}
	if rec := r.Recent(3, ""); !slices.Equal(rec, []string{"c", "b", "a"}) {
		t.Errorf("recent: %v, want c, b, a", rec)
	}
	r.Forget("c")
	if r.Dominant() != "" || r.Len() != 2 {
		t.Errorf("after the dominant left: %q, %d streams", r.Dominant(), r.Len())
	}
}
