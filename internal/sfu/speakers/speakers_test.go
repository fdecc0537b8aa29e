package speakers

import (
	"slices"
	"testing"
	"time"
)

const round = 250 * time.Millisecond

// room drives a Ranking round by round beside an independent model of
// each stream's smoothed loudness (what the rounds' means come to), so
// that a test can say when one became louder than another.
type room struct {
	t      *testing.T
	r      *Ranking
	now    time.Duration
	model  map[string]float64
	rounds int
}

func newRoom(t *testing.T) *room { return &room{t: t, r: New(), model: map[string]float64{}} }

// run feeds n rounds of these loudnesses; after each, at(i, dominant) is
// called with the round's index (counted from the room's start).
func (m *room) run(n int, loud map[string]float64, at func(i int, dominant string)) {
	for range n {
		for id, l := range loud {
			if v, ok := m.model[id]; ok {
				m.model[id] = v + smoothing*(l-v)
			} else {
				m.model[id] = l
			}
			m.r.Observe(m.now, id, l)
		}
		m.r.Decide(m.now)
		if at != nil {
			at(m.rounds, m.r.Dominant())
		}
		m.now += round
		m.rounds++
	}
}

// louderFrom is the first round from which a's model stays above b's
// (-1: never), over the rounds rec recorded.
func louderFrom(rec [][2]float64) int {
	first := -1
	for i, v := range rec {
		switch {
		case v[0] > v[1] && first < 0:
			first = i
		case v[0] <= v[1]:
			first = -1
		}
	}
	return first
}

// The first to speak takes the room at once; silence and a room's noise
// never speak; another, louder, takes the room only after it has been
// louder for Hold (a shout of a second, louder for half of it, does not);
// after a change every count starts again (a third, louder than the old
// speaker all along, must beat the new one for Hold); the order for
// last-N is by being dominant last, then by joining, never the
// receiver's own; a speaker who leaves leaves the room without one.
func TestRanking(t *testing.T) {
	quiet, noise, speech := 0.0, 127.0-75, 127.0-35
	rounds := int(Hold / round)
	m := newRoom(t)
	m.run(4, map[string]float64{"a": quiet, "b": noise, "c": quiet}, nil)
	if m.r.Dominant() != "" {
		t.Fatalf("dominant %q in silence and noise", m.r.Dominant())
	}
	var got []string
	m.run(12, map[string]float64{"a": speech, "b": noise, "c": quiet}, func(_ int, d string) { got = append(got, d) })
	if got[len(got)-1] != "a" || slices.Index(got, "a") != slices.IndexFunc(got, func(d string) bool { return d != "" }) {
		t.Fatalf("a speaking alone: dominant %v", got)
	}
	// b shouts for 750 ms: louder than a for under Hold (the model says
	// how long).
	var rec [][2]float64
	shout := func(i int, d string) {
		rec = append(rec, [2]float64{m.model["b"], m.model["a"]})
		if d != "a" {
			t.Errorf("round %d: %q took the room with a shout", i, d)
		}
	}
	m.run(3, map[string]float64{"a": speech, "b": 127, "c": quiet}, shout)
	m.run(4, map[string]float64{"a": speech, "b": noise, "c": quiet}, shout)
	louderRounds := 0
	for _, v := range rec {
		if v[0] > v[1] {
			louderRounds++
		}
	}
	if louderRounds == 0 || louderRounds >= rounds {
		t.Fatalf("the shout was louder for %d rounds: it tests nothing against a hold of %d", louderRounds, rounds)
	}
	// b and c speak on, b the louder: b takes the room Hold after it
	// became louder than a, c (louder than a too) not then.
	rec, got = nil, nil
	start := m.rounds
	m.run(16, map[string]float64{"a": speech, "b": 127 - 10, "c": 127 - 20}, func(_ int, d string) {
		rec = append(rec, [2]float64{m.model["b"], m.model["a"]})
		got = append(got, d)
	})
	from, switched := louderFrom(rec), slices.Index(got, "b")
	if from < 0 || switched != from+rounds || slices.Contains(got, "c") {
		t.Fatalf("b louder from round %d, dominant %v: want b at round %d, never c", start+from, got, start+from+rounds)
	}
	// c now louder than b: it was louder than a for long, but counts
	// again against b.
	rec, got = nil, nil
	m.run(16, map[string]float64{"a": speech, "b": 127 - 10, "c": 127}, func(_ int, d string) {
		rec = append(rec, [2]float64{m.model["c"], m.model["b"]})
		got = append(got, d)
	})
	from, switched = louderFrom(rec), slices.Index(got, "c")
	if from < 0 || switched != from+rounds {
		t.Fatalf("c louder than b from round %d of 16, dominant %v: want c %d rounds later", from, got, rounds)
	}
	if rec := m.r.Recent(2, "x"); !slices.Equal(rec, []string{"c", "b"}) {
		t.Errorf("recent 2: %v, want c then b", rec)
	}
	if rec := m.r.Recent(3, "c"); !slices.Equal(rec, []string{"b", "a"}) {
		t.Errorf("recent 3 for c: %v, want b then a, never c itself", rec)
	}
	if !m.r.Forget("c") || m.r.Dominant() != "" || m.r.Len() != 2 {
		t.Errorf("after the dominant left: %q, %d streams", m.r.Dominant(), m.r.Len())
	}
	if m.r.Forget("a") {
		t.Error("a stream that was not dominant left as if it were")
	}
}
