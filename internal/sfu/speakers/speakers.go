// Package speakers ranks a room's speakers from their audio levels (RFC
// 6464, as the data planes add them up): who speaks now (the dominant
// speaker, whom the pages highlight) and who spoke last (for last-N: each
// receiver gets video from the N most recent speakers only).
//
// A stream is speaking in a round when its mean loudness (127 less its
// mean level in -dBov) reaches Speaking: speech into a microphone sits
// 20-50 dB under full scale, a quiet room's noise 70 and more, a muted
// microphone at 127. The dominant speaker changes only when another has
// been speaking, and louder than it, for Hold (or it has stopped for
// Hold): a cough or a word said over someone does not take the
// highlight, nor the video of a last-N receiver. Recency is of being
// dominant, so the last-N order changes no faster than the highlight.
package speakers

import (
	"cmp"
	"slices"
	"time"
)

// Ranking constants.
const (
	// Speaking is the mean loudness (0..127) from which a stream speaks.
	Speaking = 127 - 60
	// Hold is how long a change of dominant speaker must have held.
	Hold = time.Second
	// smoothing: each round's loudness weighs this much in the smoothed
	// one.
	smoothing = 0.3
)

// Ranking is one room's speakers.
type Ranking struct {
	streams  map[string]*speaker
	dominant string
	seq      int // joins so far, for the order of streams never dominant
}

type speaker struct {
	loudness     float64       // smoothed mean loudness
	speaking     bool          // in the last round
	speakingFor  time.Duration // since when it has been speaking (-1: not)
	lastDominant time.Duration // when it was last dominant (-1: never)
	louderSince  time.Duration // since when it has been louder than the dominant (-1: not)
	joined       int
}

// New is a ranking without streams.
func New() *Ranking { return &Ranking{streams: map[string]*speaker{}} }

// Observe takes a round's mean loudness of stream id at now (0 when it
// sent no level: silent); a stream observed the first time joins.
func (r *Ranking) Observe(now time.Duration, id string, loudness float64) {
	s := r.streams[id]
	if s == nil {
		r.seq++
		s = &speaker{loudness: loudness, speakingFor: -1, lastDominant: -1, louderSince: -1, joined: r.seq}
		r.streams[id] = s
	}
	s.loudness += smoothing * (loudness - s.loudness)
	s.speaking = s.loudness >= Speaking
	switch {
	case !s.speaking:
		s.speakingFor = -1
	case s.speakingFor < 0:
		s.speakingFor = now
	}
}

// Forget drops stream id (it left), reporting whether it was the
// dominant speaker (the room has none until the next Decide).
func (r *Ranking) Forget(id string) bool {
	delete(r.streams, id)
	if r.dominant == id {
		r.dominant = ""
		return true
	}
	return false
}

// Decide moves the dominant speaker at now, after a round's Observe
// calls: it reports whether it changed. The new one is the loudest of
// those that have been speaking, and louder than the dominant (or it
// silent), for Hold; the first speaker takes the room at once. Every
// stream's count starts again at a change: each must beat the new
// dominant for Hold.
func (r *Ranking) Decide(now time.Duration) bool {
	d := r.streams[r.dominant]
	best := ""
	for id, s := range r.streams {
		if id == r.dominant || !s.speaking || d != nil && d.speaking && s.loudness <= d.loudness {
			s.louderSince = -1
			continue
		}
		if s.louderSince < 0 {
			s.louderSince = now
		}
		if d != nil && now-s.louderSince < Hold {
			continue
		}
		if b := r.streams[best]; best == "" || s.loudness > b.loudness || s.loudness == b.loudness && id < best {
			best = id
		}
	}
	if best == "" {
		if d != nil {
			d.lastDominant = now
		}
		return false
	}
	r.dominant = best
	for _, s := range r.streams {
		s.louderSince = -1
	}
	r.streams[best].lastDominant = now
	return true
}

// Dominant is who speaks now ("" before anyone has).
func (r *Ranking) Dominant() string { return r.dominant }

// Recent is the n streams most recently dominant, but except (a receiver
// never gets its own), the dominant first; streams never dominant follow
// in the order they joined. Fewer when there are fewer.
func (r *Ranking) Recent(n int, except string) []string {
	ids := make([]string, 0, len(r.streams))
	for id := range r.streams {
		if id != except {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		sa, sb := r.streams[a], r.streams[b]
		if c := cmp.Compare(sb.lastDominant, sa.lastDominant); c != 0 {
			return c
		}
		return cmp.Compare(sa.joined, sb.joined)
	})
	return ids[:min(n, len(ids))]
}

// Len is how many streams the ranking holds.
func (r *Ranking) Len() int { return len(r.streams) }
