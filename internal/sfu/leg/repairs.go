package leg

import (
	"slices"
	"time"
)

// repairQueue is a leg's retransmissions waiting for room in its link's
// budget, oldest first. A receiver NACKs a lost packet about once a round
// trip, ten times, then gives up on it: refused for want of room, the
// packets a link lost as it narrowed (41 at a tbf's onset in a Chromium
// run) were NACKed ten times each and most never repaired, and the
// receiver's decoder waited seconds for a key frame. Waiting, they go as
// the budget refills; where the budget cannot repair them while they
// still matter (repairWithin), a key frame is asked for instead.
type repairQueue struct {
	waiting []waitingRepair
}

type waitingRepair struct {
	number uint16        // the receiver's
	since  time.Duration // when it was NACKed
	paced  bool          // it waited for room (counted)
}

// repairWithin is how long a repair may wait: later, its frame has
// frozen on the screen anyway (15 fps freeze after about 200 ms), and a
// key frame repairs a whole burst's frames in one.
const repairWithin = 300 * time.Millisecond

// add queues number; false if it waits already.
func (q *repairQueue) add(number uint16, now time.Duration) bool {
	if slices.ContainsFunc(q.waiting, func(w waitingRepair) bool { return w.number == number }) {
		return false
	}
	q.waiting = append(q.waiting, waitingRepair{number: number, since: now})
	return true
}

// oldest is the repair that has waited longest.
func (q *repairQueue) oldest() (waitingRepair, bool) {
	if len(q.waiting) == 0 {
		return waitingRepair{}, false
	}
	return q.waiting[0], true
}

// pop drops the oldest.
func (q *repairQueue) pop() { q.waiting = q.waiting[1:] }

// overdue says whether the oldest has waited longer than repairWithin.
func (q *repairQueue) overdue(now time.Duration) bool {
	w, ok := q.oldest()
	return ok && now-w.since > repairWithin
}

// markPaced marks what waits as having found no room, returning how many
// were not marked yet.
func (q *repairQueue) markPaced() int {
	n := 0
	for i := range q.waiting {
		if !q.waiting[i].paced {
			q.waiting[i].paced = true
			n++
		}
	}
	return n
}

// clear drops every waiting repair, returning how many there were.
func (q *repairQueue) clear() int {
	n := len(q.waiting)
	q.waiting = q.waiting[:0]
	return n
}
