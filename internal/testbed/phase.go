package testbed

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Phase is a stretch of a meeting as the participants' pages sampled it
// (StartParticipants): each participant's samples taken in [Start, End)
// and the last one before Start, indexed by participant as the test
// numbers them. Its methods are the judging every browser test shares:
// rates from the counters' change over the phase, how a stream played,
// what a freeze came with.
type Phase struct {
	Name       string
	Start, End time.Time
	Samples    [][]PageSample // by participant, in time order
	Before     []PageSample   // by participant; zero if none
}

// NewPhase cuts each participant's samples (in time order) to the phase
// [start, end).
func NewPhase(name string, start, end time.Time, samples [][]PageSample) Phase {
	ph := Phase{Name: name, Start: start, End: end, Samples: make([][]PageSample, len(samples)), Before: make([]PageSample, len(samples))}
	for p := range samples {
		for _, s := range samples[p] {
			at := time.UnixMilli(s.T)
			if at.Before(ph.Start) {
				ph.Before[p] = s
			} else if at.Before(ph.End) {
				ph.Samples[p] = append(ph.Samples[p], s)
			}
		}
	}
	return ph
}

// samples is participant p's samples (none for one the phase lacks: a
// judging test builds only the participants it needs).
func (ph Phase) samples(p int) []PageSample {
	if p < len(ph.Samples) {
		return ph.Samples[p]
	}
	return nil
}

// before is participant p's last sample before the phase (zero if none).
func (ph Phase) before(p int) PageSample {
	if p < len(ph.Before) {
		return ph.Before[p]
	}
	return PageSample{}
}

// IDs are the participants' ids as the phase's last samples say.
func (ph Phase) IDs() []string {
	out := make([]string, len(ph.Samples))
	for p := range ph.Samples {
		if n := len(ph.Samples[p]); n > 0 {
			out[p] = ph.Samples[p][n-1].ID
		}
	}
	return out
}

// After is the phase from d into it on.
func (ph Phase) After(d time.Duration) Phase {
	out := Phase{Name: ph.Name + " (judged)", Start: ph.Start.Add(d), End: ph.End,
		Samples: make([][]PageSample, len(ph.Samples)), Before: make([]PageSample, len(ph.Samples))}
	for p := range ph.Samples {
		out.Before[p] = ph.before(p)
		for _, s := range ph.Samples[p] {
			if time.UnixMilli(s.T).Before(out.Start) {
				out.Before[p] = s
			} else {
				out.Samples[p] = append(out.Samples[p], s)
			}
		}
	}
	return out
}

// InboundPhase is one inbound stream over a phase: rates from the counters'
// change since the sample before the phase, Chromium's framesPerSecond's
// mean and minimum over the phase's samples.
type InboundPhase struct {
	FPS, MeanFPS, MinFPS, Kbps               float64
	Freezes, FreezeSeconds, Nacks, Plis      float64
	Pauses, PauseSeconds                     float64 // no frame for 5 s or more (not a freeze)
	PacketsLost, PacketsReceived, FrameWidth float64
}

// Inbound is participant p's video from publisher from.
func (ph Phase) Inbound(p int, from string) InboundPhase {
	s := ph.samples(p)
	if len(s) == 0 {
		return InboundPhase{}
	}
	first, last := ph.before(p), s[len(s)-1]
	if first.T == 0 {
		first = s[0]
	}
	a, z := first.Inbound[from].Video, last.Inbound[from].Video
	dt := float64(last.T-first.T) / 1000
	r := InboundPhase{Freezes: z.FreezeCount - a.FreezeCount, FreezeSeconds: z.TotalFreezesDuration - a.TotalFreezesDuration,
		Nacks: z.NackCount - a.NackCount, Plis: z.PliCount - a.PliCount, PacketsLost: z.PacketsLost - a.PacketsLost,
		Pauses: z.PauseCount - a.PauseCount, PauseSeconds: z.TotalPausesDuration - a.TotalPausesDuration,
		PacketsReceived: z.PacketsReceived - a.PacketsReceived, FrameWidth: z.FrameWidth, MinFPS: -1}
	if dt > 0 {
		r.FPS = (z.FramesDecoded - a.FramesDecoded) / dt
		r.Kbps = (z.BytesReceived - a.BytesReceived) * 8 / 1000 / dt
	}
	for _, x := range s {
		fps := x.Inbound[from].Video.FramesPerSecond
		r.MeanFPS += fps / float64(len(s))
		if r.MinFPS < 0 || fps < r.MinFPS {
			r.MinFPS = fps
		}
	}
	return r
}

// OutboundPhase is a participant's video as sent over a phase.
type OutboundPhase struct {
	VideoKbps, FPS                                float64 // from the counters' change
	MeanTargetKbps, MinTargetKbps, LastTargetKbps float64
	Nacks, Plis, Retransmitted, AvailableOutKbps  float64 // AvailableOutKbps: the last sample's
	ScalabilityMode, QualityLimitationReason      string  // the last sample's
}

// Outbound is participant p's video as sent during the phase.
func (ph Phase) Outbound(p int) OutboundPhase {
	s := ph.samples(p)
	if len(s) == 0 {
		return OutboundPhase{}
	}
	first, last := ph.before(p), s[len(s)-1]
	if first.T == 0 {
		first = s[0]
	}
	a, z := first.Outbound["video"], last.Outbound["video"]
	dt := float64(last.T-first.T) / 1000
	r := OutboundPhase{Nacks: z.NackCount - a.NackCount, Plis: z.PliCount - a.PliCount,
		Retransmitted: z.RetransmittedPacketsSent - a.RetransmittedPacketsSent, LastTargetKbps: z.TargetBitrate / 1000,
		AvailableOutKbps: last.Pub.AvailableOutgoingBitrate / 1000, ScalabilityMode: z.ScalabilityMode,
		QualityLimitationReason: z.QualityLimitationReason, MinTargetKbps: -1}
	if dt > 0 {
		r.VideoKbps = (z.BytesSent - a.BytesSent) * 8 / 1000 / dt
		r.FPS = (z.FramesEncoded - a.FramesEncoded) / dt
	}
	for _, x := range s {
		k := x.Outbound["video"].TargetBitrate / 1000
		r.MeanTargetKbps += k / float64(len(s))
		if r.MinTargetKbps < 0 || k < r.MinTargetKbps {
			r.MinTargetKbps = k
		}
	}
	return r
}

// Playback is how one stream played over a phase, leaving out the
// seconds its video was announced paused and, after each resumption, the
// samples until its first frame (the key frame follows a gap Chromium
// counts as a freeze, or as a pause if it was 5 s or more, when that
// frame comes), for at most ResumeWithin.
type Playback struct {
	Seconds, Frames, FPS, LongestFreeze float64
	Pauses                              float64 // Chromium's pauses (5 s without a frame) while not announced
}

// ResumeWithin: a resumed stream's first frame comes within this long
// (the page told, the key frame asked of the sender, sent and decoded),
// or the samples after count.
const ResumeWithin = 3 * time.Second

// Playing is how participant p's stream from `from` played over the phase.
func (ph Phase) Playing(p int, from string) Playback {
	var pb Playback
	var frames float64
	prev := ph.before(p)
	var resumed int64 // the sample (ms) its resumption was seen at; 0: none awaited
	for _, s := range ph.samples(p) {
		a, z := prev.Inbound[from].Video, s.Inbound[from].Video
		if prev.Paused[from] && !s.Paused[from] {
			resumed = s.T
		}
		if resumed != 0 {
			first := z.FramesDecoded > a.FramesDecoded
			if first || s.T-resumed > ResumeWithin.Milliseconds() {
				resumed = 0
			}
			if first { // (the first frame's interval is the gap's)
				prev = s
				continue
			}
		}
		counted := prev.T != 0 && !s.Paused[from] && !prev.Paused[from] && resumed == 0
		if counted {
			dt := float64(s.T-prev.T) / 1000
			pb.Seconds += dt
			frames += z.FramesDecoded - a.FramesDecoded
			pb.Pauses += z.PauseCount - a.PauseCount
			if n := z.FreezeCount - a.FreezeCount; n > 0 {
				pb.LongestFreeze = max(pb.LongestFreeze, (z.TotalFreezesDuration-a.TotalFreezesDuration)/n)
			} else if d := z.TotalFreezesDuration - a.TotalFreezesDuration; d > 0 {
				pb.LongestFreeze = max(pb.LongestFreeze, d)
			}
		}
		prev = s
	}
	if pb.Seconds > 0 {
		pb.Frames, pb.FPS = frames, frames/pb.Seconds
	}
	return pb
}

// SlowerThan says whether the stream played slower than fps, by a frame
// or more: counted over whole samples, a stream at 3.75 fps shows 3 frames
// in some seconds, and one resumed a second before the window ended was
// rated 2.99 fps.
func (pb Playback) SlowerThan(fps float64) bool { return pb.Frames+1 < fps*pb.Seconds }

// FreezesWithLoss splits participant p's freezes of the stream from
// `from` over the phase by what came with them: a packet lost or a NACK
// sent in the same sample interval or the one before (the network, so
// maybe the SFU), or every packet there and none asked again (a decoder or
// encoder short of CPU on a 2-core VM: the SFU reaches a receiver only
// through the packets it sends).
func (ph Phase) FreezesWithLoss(p int, from string) (withLoss, onTime float64) {
	s := append([]PageSample{ph.before(p)}, ph.samples(p)...)
	for i := 1; i < len(s); i++ {
		a, z := s[i-1].Inbound[from].Video, s[i].Inbound[from].Video
		n := z.FreezeCount - a.FreezeCount
		if n <= 0 || s[i-1].T == 0 {
			continue
		}
		since := s[max(i-2, 0)].Inbound[from].Video
		if z.PacketsLost > since.PacketsLost || z.NackCount > since.NackCount {
			withLoss += n
		} else {
			onTime += n
		}
	}
	return withLoss, onTime
}

// JitterBufferMs is the mean time participant p's frames from `from`
// waited in the jitter buffer over the phase (ms): what arrival jitter,
// the SFU's included, costs.
func (ph Phase) JitterBufferMs(p int, from string) float64 {
	s := ph.samples(p)
	if len(s) == 0 {
		return 0
	}
	a, z := ph.before(p).Inbound[from].Video, s[len(s)-1].Inbound[from].Video
	if n := z.JitterBufferEmittedCount - a.JitterBufferEmittedCount; n > 0 {
		return 1000 * (z.JitterBufferDelay - a.JitterBufferDelay) / n
	}
	return 0
}

// PlayingAsCarried is the share of the phase's samples in which
// participant p's page had at least need(offset from start) of the
// streams from `from` playing (not announced paused).
func (ph Phase) PlayingAsCarried(p int, from []string, start time.Time, need func(time.Duration) int) float64 {
	ok := 0
	for _, s := range ph.samples(p) {
		n := need(time.UnixMilli(s.T).Sub(start))
		playing := 0
		for _, f := range from {
			if !s.Paused[f] {
				playing++
			}
		}
		if playing >= n {
			ok++
		}
	}
	if len(ph.samples(p)) == 0 {
		return 0
	}
	return float64(ok) / float64(len(ph.samples(p)))
}

// MinTarget is participant p's lowest video target over the phase
// (kbit/s), leaving out the samples within hold after each of the phase
// offsets in skip.
func (ph Phase) MinTarget(p int, skip []time.Duration, hold time.Duration) float64 {
	low := -1.0
	for _, s := range ph.samples(p) {
		at := time.UnixMilli(s.T).Sub(ph.Start)
		if slices.ContainsFunc(skip, func(d time.Duration) bool { return at >= d && at < d+hold }) {
			continue
		}
		if k := s.Outbound["video"].TargetBitrate / 1000; low < 0 || k < low {
			low = k
		}
	}
	return low
}

// InboundAudio is participant p's audio from `from` over the phase: its
// counters' change since the sample before it.
func (ph Phase) InboundAudio(p int, from string) InStats {
	s := ph.samples(p)
	if len(s) == 0 {
		return InStats{}
	}
	a, z := ph.before(p).Inbound[from].Audio, s[len(s)-1].Inbound[from].Audio
	return InStats{PacketsReceived: z.PacketsReceived - a.PacketsReceived, PacketsLost: z.PacketsLost - a.PacketsLost}
}

// RecentInboundKbps is what participant p received (audio and video of
// every sender, RTP payload bytes) over the phase's last n samples.
func (ph Phase) RecentInboundKbps(p, n int) float64 {
	s := ph.samples(p)
	if len(s) <= n {
		n = len(s) - 1
	}
	if n <= 0 {
		return 0
	}
	a, z := s[len(s)-1-n], s[len(s)-1]
	var bytes float64
	for from, in := range z.Inbound {
		bytes += in.Video.BytesReceived + in.Audio.BytesReceived - a.Inbound[from].Video.BytesReceived - a.Inbound[from].Audio.BytesReceived
	}
	return bytes * 8 / float64(z.T-a.T)
}

// Duplicates says where participant p's packetsLost of from's audio or
// video fell between two samples over the phases, in turn ("": never): a
// receiver counts a packet it got twice as one more received, so lost
// falls.
func Duplicates(phases []Phase, p int, from string) string {
	var out []string
	var prev *PageSample
	for _, ph := range phases {
		for i := range ph.samples(p) {
			s := &ph.samples(p)[i]
			if prev != nil {
				for kind, pair := range map[string][2]InStats{
					"video": {prev.Inbound[from].Video, s.Inbound[from].Video},
					"audio": {prev.Inbound[from].Audio, s.Inbound[from].Audio},
				} {
					if pair[1].PacketsLost < pair[0].PacketsLost {
						out = append(out, fmt.Sprintf("%s %s %v -> %v", ph.Name, kind, pair[0].PacketsLost, pair[1].PacketsLost))
					}
				}
			}
			prev = s
		}
	}
	return strings.Join(out, "; ")
}
