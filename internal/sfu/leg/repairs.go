package leg

import "time"

// repairQueue is a leg's retransmissions waiting for room in its link's
// budget, oldest first. A receiver NACKs a lost packet about once a round
// trip, ten times, then gives up on it: refused for want of room, the
// packets a link lost as it narrowed (41 at a tbf's onset in a Chromium
// run) were NACKed ten times each and most never repaired, and the
// receiver's decoder waited seconds for a key frame. Waiting, they go as
// the budget refills; where the budget cannot repair them while they
// still matter (repairWithin), a key frame is asked for instead, and the
// numbers given up are not queued again while it comes (superseded).
type repairQueue struct {
	waiting []waitingRepair
	marked  int           // the first marked entries have been counted paced
	in      numberSet     // the numbers waiting
	given   numberSet     // the numbers superseded by the last key frame request
	givenAt time.Duration // when (0: never)
}

type waitingRepair struct {
	number uint16        // the receiver's
	since  time.Duration // when it was NACKed
	size   int           // its retransmission's bytes
}

// Repair queue limits.
const (
	// repairWithin is how long a repair may wait: later, its frame has
	// frozen on the screen anyway (15 fps freeze after about 200 ms), and
	// a key frame repairs a whole burst's frames in one.
	repairWithin = 300 * time.Millisecond
	// maxWaiting bounds the queue (a second of video at 500 packets a
	// second): a NACK of thousands of numbers costs no more.
	maxWaiting = 512
	// keyFrameRepairHold: after asking for a key frame to repair a burst,
	// the receiver goes on NACKing the burst's packets until the key frame
	// is in; for this long those are not queued again.
	keyFrameRepairHold = time.Second
)

// numberSet is a set of 16-bit sequence numbers.
type numberSet [1 << 10]uint64

func (s *numberSet) has(n uint16) bool { return s[n>>6]&(1<<(n&63)) != 0 }
func (s *numberSet) put(n uint16)      { s[n>>6] |= 1 << (n & 63) }
func (s *numberSet) drop(n uint16)     { s[n>>6] &^= 1 << (n & 63) }

// add queues number, whose retransmission is size bytes: false if it
// waits already or the queue is full.
func (q *repairQueue) add(number uint16, size int, now time.Duration) bool {
	if q.in.has(number) || len(q.waiting) >= maxWaiting {
		return false
	}
	q.in.put(number)
	q.waiting = append(q.waiting, waitingRepair{number: number, since: now, size: size})
	return true
}

// superseded says whether number was given up for the key frame asked
// for less than keyFrameRepairHold ago.
func (q *repairQueue) superseded(number uint16, now time.Duration) bool {
	return q.givenAt != 0 && now-q.givenAt < keyFrameRepairHold && q.given.has(number)
}

// oldest is the repair that has waited longest.
func (q *repairQueue) oldest() (waitingRepair, bool) {
	if len(q.waiting) == 0 {
		return waitingRepair{}, false
	}
	return q.waiting[0], true
}

// pop drops the oldest.
func (q *repairQueue) pop() {
	q.in.drop(q.waiting[0].number)
	q.waiting = q.waiting[1:]
	q.marked = max(q.marked-1, 0)
}

// overdue says whether the oldest has waited longer than repairWithin.
func (q *repairQueue) overdue(now time.Duration) bool {
	w, ok := q.oldest()
	return ok && now-w.since > repairWithin
}

// markPaced marks what waits as having found no room, returning how many
// were not marked yet.
func (q *repairQueue) markPaced() int {
	n := len(q.waiting) - q.marked
	q.marked = len(q.waiting)
	return n
}

// giveUp drops every waiting repair, remembering them as superseded from
// now (a key frame asked for) when keyFrame; it returns how many there were.
func (q *repairQueue) giveUp(now time.Duration, keyFrame bool) int {
	if keyFrame {
		q.given, q.givenAt = numberSet{}, now
	}
	for _, w := range q.waiting {
		q.in.drop(w.number)
		if keyFrame {
			q.given.put(w.number)
		}
	}
	n := len(q.waiting)
	q.waiting, q.marked = q.waiting[:0], 0
	return n
}
