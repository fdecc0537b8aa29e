package leg

import (
	"slices"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/speakers"
)

// observeLevels takes the round's audio levels of a sender whose audio
// carries them (its stream's mean loudness since the last round).
func (s *Sender) observeLevels() {
	if !slices.ContainsFunc(s.cfg.Sources, func(src dataplane.Source) bool { return src.LevelExt != 0 }) {
		return
	}
	lv, err := s.t.cfg.Plane.AudioLevels(s.cfg.From)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.loudness, s.levels, s.speaks = lv.Sub(s.levels).Mean(), lv, true
	s.mu.Unlock()
}

// speaker is the sender's loudness this round, if its audio carries
// levels.
func (s *Sender) speaker() (loudness float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loudness, s.speaks
}

// rankSpeakers ranks each room's speakers on the round's levels, tells
// OnSpeaker of a new dominant one, and hides from each receiver the video
// of the speakers not among its LastN most recent (LastN 0: none hidden).
// A stream without levels (a shared screen) is never ranked nor hidden.
func (t *Table) rankSpeakers(now time.Duration, senders []*Sender) {
	type ranked struct {
		s        *Sender
		loudness float64
		legs     []*Leg
	}
	byRoom := map[string][]ranked{}
	for _, s := range senders {
		if loudness, ok := s.speaker(); ok {
			byRoom[s.cfg.Room] = append(byRoom[s.cfg.Room], ranked{s, loudness, s.Legs()})
		}
	}
	type hiding struct {
		l      *Leg
		hidden bool
	}
	var changed []string
	var hide []hiding
	t.mu.Lock() // (no sender's or leg's lock under it: SetLegs takes them the other way round)
	left := t.speakerLeft
	t.speakerLeft = map[string]bool{}
	for room, ss := range byRoom {
		// A sender closed since the round began was forgotten: it must not
		// come back.
		ss = slices.DeleteFunc(ss, func(x ranked) bool { return t.senders[x.s.cfg.From] != x.s })
		if len(ss) == 0 {
			continue
		}
		r := t.rooms[room]
		if r == nil {
			r = speakers.New()
			t.rooms[room] = r
		}
		for _, x := range ss {
			r.Observe(now, x.s.cfg.ID, x.loudness)
		}
		if r.Decide(now) {
			changed = append(changed, room, r.Dominant())
			delete(left, room)
		}
		if t.cfg.LastN > 0 {
			// One order a room (N+1: a receiver among them skips itself).
			top := r.Recent(t.cfg.LastN+1, "")
			for _, x := range ss {
				for _, l := range x.legs {
					hide = append(hide, hiding{l, !shown(top, t.cfg.LastN, l.cfg.Receiver, x.s.cfg.ID)})
				}
			}
		}
	}
	for room := range left { // its speaker left, and nobody took the room this round
		if r := t.rooms[room]; r == nil || r.Dominant() == "" {
			changed = append(changed, room, "")
		}
	}
	t.mu.Unlock()
	for _, h := range hide {
		h.l.setHidden(h.hidden)
	}
	for i := 0; i+1 < len(changed); i += 2 {
		t.cfg.Log.Debug("dominant speaker", "room", changed[i], "stream", changed[i+1])
		if t.cfg.OnSpeaker != nil {
			t.cfg.OnSpeaker(changed[i], changed[i+1])
		}
	}
}

// shown says whether stream is among the n most recent speakers of top
// (speakers.Ranking.Recent's n+1) for receiver, who is never its own.
func shown(top []string, n int, receiver, stream string) bool {
	for _, id := range top {
		if id == receiver {
			continue
		}
		if n == 0 {
			return false
		}
		if id == stream {
			return true
		}
		n--
	}
	return false
}

// forgetSpeakerLocked drops a sender from its room's ranking (it closed;
// t.mu held). A room that lost its dominant speaker is told at the next
// round, not here: Close runs under its caller's locks (the controller's),
// and the controller's Speaker takes its own.
func (t *Table) forgetSpeakerLocked(s *Sender) {
	r := t.rooms[s.cfg.Room]
	if r == nil {
		return
	}
	if r.Forget(s.cfg.ID) {
		t.speakerLeft[s.cfg.Room] = true
	}
	if r.Len() == 0 {
		delete(t.rooms, s.cfg.Room)
	}
}

// Dominant is the room's dominant speaker's stream ("" before anyone
// spoke).
func (t *Table) Dominant(room string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.rooms[room]; r != nil {
		return r.Dominant()
	}
	return ""
}

func (l *Leg) setHidden(h bool) {
	l.mu.Lock()
	l.hidden = h
	l.mu.Unlock()
}
