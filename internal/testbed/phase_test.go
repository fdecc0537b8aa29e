package testbed

import (
	"testing"
	"time"
)

// The judge of one stream's playback: after an announced resumption the
// samples up to its first frame are left out (Chromium counts the gap
// before it as a pause when it comes), and no longer than ResumeWithin: a
// stream that never shows again fails.
func TestPlaybackAfterAResumption(t *testing.T) {
	series := func(firstFrameAt int64) Phase {
		ph := Phase{Samples: make([][]PageSample, 3)}
		frames, pauses := 100.0, 0.0
		for sec := int64(1); sec <= 12; sec++ {
			paused := sec <= 4
			if sec == firstFrameAt {
				frames, pauses = frames+1, pauses+1 // the key frame, after a gap of 5 s or more
			} else if firstFrameAt > 0 && sec > firstFrameAt {
				frames += 15
			}
			v := InStats{FramesDecoded: frames, PauseCount: pauses}
			ph.Samples[2] = append(ph.Samples[2], PageSample{T: 1000 * sec, Paused: map[string]bool{"p1": paused},
				Inbound: map[string]InboundStreams{"p1": {Video: v}}})
		}
		return ph
	}
	pb := series(7).Playing(2, "p1") // resumed at 5 s, its key frame at 7 s
	if pb.Pauses != 0 || pb.FPS < 14 || pb.Seconds != 5 {
		t.Errorf("resumed, first frame 2 s later: %+v; want no pause, 15 fps over the 5 s after it", pb)
	}
	pb = series(0).Playing(2, "p1") // resumed at 5 s, never a frame
	if pb.Seconds == 0 || pb.FPS != 0 || !pb.SlowerThan(3) {
		t.Errorf("resumed, no frame since: %+v; want the seconds after %v counted, at 0 fps", pb, ResumeWithin)
	}
	// The lowest layer's 3.75 fps over whole samples: a second with 3
	// frames, as when a stream resumes a second before the window ends.
	ph := Phase{Samples: make([][]PageSample, 3)}
	for sec, frames := range []float64{10, 13} {
		ph.Samples[2] = append(ph.Samples[2], PageSample{T: 1003 * int64(sec+1),
			Inbound: map[string]InboundStreams{"p1": {Video: InStats{FramesDecoded: frames}}}})
	}
	if pb := ph.Playing(2, "p1"); pb.SlowerThan(3) {
		t.Errorf("3 frames in a second of a 3.75 fps stream: %+v, want 3 fps or more", pb)
	}
	ph.Samples[2][1].Inbound["p1"] = InboundStreams{Video: InStats{FramesDecoded: 12}}
	if pb := ph.Playing(2, "p1"); !pb.SlowerThan(3) {
		t.Errorf("2 frames in a second: %+v, want slower than 3 fps", pb)
	}
}

// A freeze counts against the SFU where a packet was lost or asked again
// in its interval or the one before; one with every packet there is the
// machine's.
func TestFreezesWithLoss(t *testing.T) {
	ph := Phase{Samples: make([][]PageSample, 1), Before: make([]PageSample, 1)}
	ph.Before[0] = PageSample{T: 1000, Inbound: map[string]InboundStreams{"p2": {}}}
	for sec, v := range []InStats{
		{FreezeCount: 1},                               // 2 s: on time
		{FreezeCount: 1, NackCount: 1},                 // 3 s: a NACK, no freeze
		{FreezeCount: 2, NackCount: 1},                 // 4 s: the NACK a second before
		{FreezeCount: 2, NackCount: 1},                 // 5 s
		{FreezeCount: 2, NackCount: 1, PacketsLost: 1}, // 6 s: a loss, no freeze
		{FreezeCount: 2, NackCount: 1, PacketsLost: 1}, // 7 s
		{FreezeCount: 4, NackCount: 1, PacketsLost: 1}, // 8 s: two, the loss 2 s before
	} {
		ph.Samples[0] = append(ph.Samples[0], PageSample{T: int64(2000 + 1000*sec), Inbound: map[string]InboundStreams{"p2": {Video: v}}})
	}
	if withLoss, onTime := ph.FreezesWithLoss(0, "p2"); withLoss != 1 || onTime != 3 {
		t.Errorf("freezes with loss %v, on time %v; want 1 and 3", withLoss, onTime)
	}
}

// A phase holds each participant's samples in [Start, End) and the last
// one before; After moves its start on; Duplicates sees packetsLost fall
// across phases.
func TestPhaseCutAfterAndDuplicates(t *testing.T) {
	var all [][]PageSample
	for p, lost := range [][]float64{{0, 1, 1, 1, 2, 2}, {0, 0, 2, 1, 1, 1}} {
		all = append(all, nil)
		for sec, l := range lost {
			all[p] = append(all[p], PageSample{T: int64(1000 * (sec + 1)), ID: []string{"p1", "p2"}[p],
				Inbound: map[string]InboundStreams{"x": {Video: InStats{PacketsLost: l}}}})
		}
	}
	first := NewPhase("first", time.UnixMilli(0), time.UnixMilli(2500), all)
	ph := NewPhase("second", time.UnixMilli(2500), time.UnixMilli(5000), all)
	if len(ph.Samples[1]) != 2 || ph.Samples[1][0].T != 3000 || ph.Before[1].T != 2000 || ph.IDs()[1] != "p2" {
		t.Errorf("cut to [2.5 s, 5 s): %+v, before %+v", ph.Samples[1], ph.Before[1])
	}
	if judged := ph.After(time.Second); len(judged.Samples[0]) != 1 || judged.Samples[0][0].T != 4000 || judged.Before[0].T != 3000 {
		t.Errorf("after 1 s: %+v, before %+v", judged.Samples[0], judged.Before[0])
	}
	if d := Duplicates([]Phase{first, ph}, 0, "x"); d != "" {
		t.Errorf("P1's lost never fell, got duplicates %q", d)
	}
	if d := Duplicates([]Phase{first, ph}, 1, "x"); d != "second video 2 -> 1" {
		t.Errorf("P2's lost fell 2 -> 1 in the second phase, got %q", d)
	}
}
