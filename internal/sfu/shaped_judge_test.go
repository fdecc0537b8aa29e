package sfu

import "testing"

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
			v := inStats{FramesDecoded: frames, PauseCount: pauses}
			ph.Samples[2] = append(ph.Samples[2], pageSample{T: 1000 * sec, Paused: map[string]bool{"p1": paused},
				Inbound: map[string]inboundStreams{"p1": {Video: v}}})
		}
		return ph
	}
	pb := series(7).playing(2, "p1") // resumed at 5 s, its key frame at 7 s
	if pb.pauses != 0 || pb.fps < 14 || pb.seconds != 5 {
		t.Errorf("resumed, first frame 2 s later: %+v; want no pause, 15 fps over the 5 s after it", pb)
	}
	pb = series(0).playing(2, "p1") // resumed at 5 s, never a frame
	if pb.seconds == 0 || pb.fps != 0 {
		t.Errorf("resumed, no frame since: %+v; want the seconds after %v counted, at 0 fps", pb, resumeWithin)
	}
}
