package ratecontrol

import (
	"slices"
	"time"
)

// A receiver's legs (one PeerConnection per sender) send feedback each on
// its own, at its own times, but their packets queue on one link: the
// estimator takes them together, in the order they arrived (the legs of
// one browser share its clock). An ack waits until every leg that reports
// has reported past its arrival, or mergeWait.
const (
	mergeWait    = 300 * time.Millisecond
	legReporting = 300 * time.Millisecond // a leg that sent feedback this recently holds the merge back
)

type merge struct {
	pending []pendingAck
	legs    map[any]legReport
}

type pendingAck struct {
	Ack
	at time.Duration // when its feedback came
}

type legReport struct {
	arrived time.Duration // the latest arrival it reported
	at      time.Duration // when
}

// add takes one leg's acks (its feedback) at now.
func (m *merge) add(leg any, now time.Duration, acks []Ack) {
	if m.legs == nil {
		m.legs = map[any]legReport{}
	}
	r := m.legs[leg]
	r.at = now
	for _, a := range acks {
		m.pending = append(m.pending, pendingAck{Ack: a, at: now})
		if a.Received {
			r.arrived = max(r.arrived, a.Arrived)
		}
	}
	m.legs[leg] = r
}

// ready is what may go to the estimator at now, in arrival order (lost
// packets where their feedback put them).
func (m *merge) ready(now time.Duration) []Ack {
	watermark := time.Duration(1<<63 - 1)
	for leg, r := range m.legs {
		if now-r.at > legReporting {
			if now-r.at > 10*time.Second {
				delete(m.legs, leg)
			}
			continue
		}
		watermark = min(watermark, r.arrived)
	}
	var out, keep []pendingAck
	for _, p := range m.pending {
		if !p.Received || p.Arrived <= watermark || now-p.at >= mergeWait {
			out = append(out, p)
		} else {
			keep = append(keep, p)
		}
	}
	m.pending = keep
	slices.SortStableFunc(out, func(a, b pendingAck) int {
		if !a.Received || !b.Received {
			return 0
		}
		return int(a.Arrived - b.Arrived)
	})
	acks := make([]Ack, len(out))
	for i, p := range out {
		acks[i] = p.Ack
	}
	return acks
}

// forget drops a leg that left.
func (m *merge) forget(leg any) { delete(m.legs, leg) }
