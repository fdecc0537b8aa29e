package sfu

import (
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The shaped-receiver test's judge of one stream's playback: after an
// announced resumption the samples up to its first frame are left out
// (Chromium counts the gap before it as a pause when it comes), and no
// longer than resumeWithin: a stream that never shows again fails.
func TestPlaybackAfterAResumption(t *testing.T) {
	series := func(firstFrameAt int64) phaseSeries {
		var ph phaseSeries
		frames, pauses := 100.0, 0.0
		for sec := int64(1); sec <= 12; sec++ {
			paused := sec <= 4
			if sec == firstFrameAt {
				frames, pauses = frames+1, pauses+1 // the key frame, after a gap of 5 s or more
			} else if firstFrameAt > 0 && sec > firstFrameAt {
				frames += 15
			}
			v := testbed.InStats{FramesDecoded: frames, PauseCount: pauses}
			ph.Samples[2] = append(ph.Samples[2], testbed.PageSample{T: 1000 * sec, Paused: map[string]bool{"p1": paused},
				Inbound: map[string]testbed.InboundStreams{"p1": {Video: v}}})
		}
		return ph
	}
	pb := series(7).playing(2, "p1") // resumed at 5 s, its key frame at 7 s
	if pb.pauses != 0 || pb.fps < 14 || pb.seconds != 5 {
		t.Errorf("resumed, first frame 2 s later: %+v; want no pause, 15 fps over the 5 s after it", pb)
	}
	pb = series(0).playing(2, "p1") // resumed at 5 s, never a frame
	if pb.seconds == 0 || pb.fps != 0 || !pb.slowerThan(3) {
		t.Errorf("resumed, no frame since: %+v; want the seconds after %v counted, at 0 fps", pb, resumeWithin)
	}
	// The lowest layer's 3.75 fps over whole samples: a second with 3
	// frames, as when a stream resumes a second before the window ends.
	var ph phaseSeries
	for sec, frames := range []float64{10, 13} {
		ph.Samples[2] = append(ph.Samples[2], testbed.PageSample{T: 1003 * int64(sec+1),
			Inbound: map[string]testbed.InboundStreams{"p1": {Video: testbed.InStats{FramesDecoded: frames}}}})
	}
	if pb := ph.playing(2, "p1"); pb.slowerThan(3) {
		t.Errorf("3 frames in a second of a 3.75 fps stream: %+v, want 3 fps or more", pb)
	}
	ph.Samples[2][1].Inbound["p1"] = testbed.InboundStreams{Video: testbed.InStats{FramesDecoded: 12}}
	if pb := ph.playing(2, "p1"); !pb.slowerThan(3) {
		t.Errorf("2 frames in a second: %+v, want slower than 3 fps", pb)
	}
}

// The judge's count of streams P3 must play follows what the link
// carries: both, but while P1 sends L1T2 (and restructuredGrace after its
// switch back) one, where L1T2's lowest layer no longer fits beside the
// other's; a pause of P1 outside that span counts against the SFU.
func TestPlayingAsTheLinkCarries(t *testing.T) {
	start := time.UnixMilli(0)
	fit := &fitting{streams: 2, restructured: 1}
	series := func(pausedFrom, pausedTo time.Duration) phaseSeries {
		var ph phaseSeries
		for at := 8 * time.Second; at < 24*time.Second; at += time.Second {
			ph.Samples[2] = append(ph.Samples[2], testbed.PageSample{T: at.Milliseconds(),
				Paused: map[string]bool{"p1": at >= pausedFrom && at < pausedTo, "p2": false}})
		}
		return ph
	}
	need := fit.need
	if got := series(12*time.Second, 21*time.Second).playingAsCarried(2, []string{"p1", "p2"}, start, need); got != 1 {
		t.Errorf("P1 paused 12-21 s, in L1T2's span: %.2f of the samples as carried, want all", got)
	}
	if got := series(4*time.Second, 21*time.Second).playingAsCarried(2, []string{"p1", "p2"}, start, need); got != 14.0/16 {
		t.Errorf("P1 paused 4-21 s: %.2f of the samples as carried, want the 2 s before L1T2 short (14 of 16)", got)
	}
	fit.restructured = 2
	if got := series(12*time.Second, 21*time.Second).playingAsCarried(2, []string{"p1", "p2"}, start, need); got != 7.0/16 {
		t.Errorf("P1 paused 12-21 s where L1T2 fits too: %.2f of the samples as carried, want 7 of 16", got)
	}
}

// An unshaped receiver's freeze counts against the SFU where a packet was
// lost or asked again in its interval or the one before; one with every
// packet there is the machine's.
func TestFreezesWithLoss(t *testing.T) {
	var ph phaseSeries
	ph.Before[0] = testbed.PageSample{T: 1000, Inbound: map[string]testbed.InboundStreams{"p2": {}}}
	for sec, v := range []testbed.InStats{
		{FreezeCount: 1},                               // 2 s: on time
		{FreezeCount: 1, NackCount: 1},                 // 3 s: a NACK, no freeze
		{FreezeCount: 2, NackCount: 1},                 // 4 s: the NACK a second before
		{FreezeCount: 2, NackCount: 1},                 // 5 s
		{FreezeCount: 2, NackCount: 1, PacketsLost: 1}, // 6 s: a loss, no freeze
		{FreezeCount: 2, NackCount: 1, PacketsLost: 1}, // 7 s
		{FreezeCount: 4, NackCount: 1, PacketsLost: 1}, // 8 s: two, the loss 2 s before
	} {
		ph.Samples[0] = append(ph.Samples[0], testbed.PageSample{T: int64(2000 + 1000*sec), Inbound: map[string]testbed.InboundStreams{"p2": {Video: v}}})
	}
	if withLoss, onTime := ph.freezesWithLoss(0, "p2"); withLoss != 1 || onTime != 3 {
		t.Errorf("freezes with loss %v, on time %v; want 1 and 3", withLoss, onTime)
	}
}
