package ratecontrol

import (
	"cmp"
	"slices"
)

// Targets as the allocation gives them: a decode target 0..n-1, or one of these.
const (
	EveryLayer = -1 // not adapted: the sender's stream as it is
	Paused     = -2 // no video: the lowest layer does not fit (audio goes on)
)

// Stream is one of a link's streams (a sender's audio and video to this
// receiver) as the allocation sees it.
type Stream struct {
	// Rates is each decode target's bitrate, ascending (target i includes
	// the layers below it); empty: the video cannot be adapted (its
	// structure unknown yet), and it costs Full.
	Rates []float64
	// Other is what the stream sends whatever its target: its audio.
	Other float64
	// Full is the stream's whole rate, for one that cannot be adapted.
	Full float64
	// Current is its target now (Paused, EveryLayer or a decode target):
	// streams with video now are served first, so one constrained stream
	// does not take another's picture.
	Current int
	// Priority: among streams showing alike, higher is served first (a
	// shared screen, whose text a receiver must read, before cameras).
	Priority int
}

// Cost is what the stream sends at target t.
func (s Stream) Cost(t int) float64 { return s.cost(t) }

func (s Stream) cost(t int) float64 {
	switch {
	case len(s.Rates) == 0:
		return s.Full + s.Other
	case t == Paused:
		return s.Other
	case t == EveryLayer || t >= len(s.Rates):
		return s.Rates[len(s.Rates)-1] + s.Other
	}
	return s.Rates[t] + s.Other
}

// top is the stream's highest target.
func (s Stream) top() int {
	if len(s.Rates) == 0 {
		return EveryLayer
	}
	return len(s.Rates) - 1
}

// Total is what the streams send at these targets.
func Total(streams []Stream, targets []int) float64 {
	var sum float64
	for i, s := range streams {
		sum += s.cost(targets[i])
	}
	return sum
}

// Allocate gives each stream the highest target that fits budget (bits/s)
// with the others: every stream's audio first, then each its lowest layer
// in turn (those showing video now first, by Priority), then one layer more each,
// round after round, while the next fits. A stream whose lowest layer
// does not fit is paused; one that cannot be adapted is given whole.
func Allocate(budget float64, streams []Stream) []int {
	targets := make([]int, len(streams))
	left := budget
	for i, s := range streams {
		targets[i] = Paused
		if len(s.Rates) == 0 {
			targets[i] = EveryLayer
		}
		left -= s.cost(targets[i])
	}
	order := make([]int, 0, len(streams))
	for _, showing := range []bool{true, false} {
		from := len(order)
		for i, s := range streams {
			if len(s.Rates) > 0 && (s.Current != Paused) == showing {
				order = append(order, i)
			}
		}
		slices.SortStableFunc(order[from:], func(a, b int) int { return cmp.Compare(streams[b].Priority, streams[a].Priority) })
	}
	for grew := true; grew; {
		grew = false
		for _, i := range order {
			s := streams[i]
			if targets[i] >= s.top() {
				continue
			}
			step := s.cost(targets[i]+1) - s.cost(targets[i])
			if targets[i] == Paused {
				step = s.cost(0) - s.cost(Paused)
			}
			if step > left {
				continue
			}
			if targets[i] == Paused {
				targets[i] = 0
			} else {
				targets[i]++
			}
			left -= step
			grew = true
		}
	}
	return targets
}

// Top is every stream at its highest target.
func Top(streams []Stream) []int {
	targets := make([]int, len(streams))
	for i, s := range streams {
		targets[i] = s.top()
	}
	return targets
}
