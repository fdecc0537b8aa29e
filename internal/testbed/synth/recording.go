package synth

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/pion/rtp"
)

// The stream one headless Chromium 156 participant sent ebrtc sfu in a
// two-party meeting (Opus, and AV1 at 320x180 with the dependency
// descriptor; 952 packets in 12 s, about 80/s), captured by TestCaptureChromiumStream in
// internal/sfu; and that browser's offer for its send-only PeerConnection
// (same payload types and extension ids).
var (
	//go:embed testdata/chromium-av1.rtpdump
	chromiumStream []byte
	//go:embed testdata/chromium-offer.sdp
	ChromiumOffer string
)

// Recording is a captured publisher's RTP, ready to replay.
type Recording struct {
	Packets []Packet
	// Span is how long one pass lasts: the next pass starts after it.
	Span time.Duration
	// Audio and Video are the captured SSRCs; DDExtension the dependency
	// descriptor's header extension id (0: none).
	Audio, Video track
	DDExtension  uint8
}

type track struct {
	SSRC        uint32
	PayloadType uint8
	ClockRate   uint32
	first, last uint32 // RTP timestamps
	count       int    // packets per pass
	frames      uint16 // dependency descriptor frame numbers per pass
}

// DDExtensionID is the dependency descriptor's extension id in Chromium's
// offer (a=extmap:12 ...dependency-descriptor-rtp-header-extension).
const DDExtensionID = 12

// Chromium is the embedded capture.
func Chromium() (*Recording, error) {
	pkts, err := ReadRTPDump(bytes.NewReader(chromiumStream))
	if err != nil {
		return nil, err
	}
	return NewRecording(pkts, 111, 45, DDExtensionID)
}

// NewRecording takes packets of one audio and one video payload type
// (Opus at 48 kHz, video at 90 kHz); others are dropped.
func NewRecording(pkts []Packet, audioPT, videoPT, ddExt uint8) (*Recording, error) {
	rec := &Recording{DDExtension: ddExt}
	rec.Audio = track{PayloadType: audioPT, ClockRate: 48000}
	rec.Video = track{PayloadType: videoPT, ClockRate: 90000}
	var firstFrame uint16
	for _, p := range pkts {
		var h rtp.Header
		if _, err := h.Unmarshal(p.Data); err != nil {
			return nil, fmt.Errorf("synth: recording: %w", err)
		}
		t := rec.track(h.PayloadType)
		if t == nil {
			continue
		}
		if t.count == 0 {
			t.SSRC, t.first = h.SSRC, h.Timestamp
		}
		if h.SSRC != t.SSRC {
			return nil, fmt.Errorf("synth: recording: two SSRCs of payload type %d", h.PayloadType)
		}
		t.last = h.Timestamp
		t.count++
		if dd := h.GetExtension(ddExt); len(dd) >= 3 && t == &rec.Video {
			n := binary.BigEndian.Uint16(dd[1:])
			if rec.Video.frames == 0 {
				firstFrame = n
			}
			rec.Video.frames = n - firstFrame + 1
		}
		rec.Packets = append(rec.Packets, p)
		rec.Span = p.At
	}
	if rec.Audio.count == 0 || rec.Video.count == 0 {
		return nil, fmt.Errorf("synth: recording: want audio (PT %d) and video (PT %d) packets", audioPT, videoPT)
	}
	rec.Span += 20 * time.Millisecond // one audio packet's time after the last
	return rec, nil
}

func (r *Recording) track(pt uint8) *track {
	switch pt {
	case r.Audio.PayloadType:
		return &r.Audio
	case r.Video.PayloadType:
		return &r.Video
	}
	return nil
}

// Stream is one virtual sender's replay of a recording: its own SSRCs,
// sequence numbers, timestamps and frame numbers, continuing pass after
// pass as one endless stream.
type Stream struct {
	rec                  *Recording
	AudioSSRC, VideoSSRC uint32
	seqBase              uint16
	tsBase               uint32
	frameBase            uint16
}

// NewStream is virtual sender n of the recording.
func (r *Recording) NewStream(n uint32) *Stream {
	return &Stream{rec: r, AudioSSRC: 0x10000000 + 2*n, VideoSSRC: 0x10000001 + 2*n,
		seqBase: uint16(n * 7919), tsBase: n * 104729, frameBase: uint16(n * 331)}
}

// Packet is the stream's kth packet (k counts on across passes) and when
// it is due, from the stream's start.
func (s *Stream) Packet(k int) ([]byte, time.Duration, error) {
	rec := s.rec
	pass, i := k/len(rec.Packets), k%len(rec.Packets)
	src := rec.Packets[i]
	var p rtp.Packet
	if err := p.Unmarshal(src.Data); err != nil {
		return nil, 0, err
	}
	t := rec.track(p.PayloadType)
	span := uint32(rec.Span.Seconds() * float64(t.ClockRate))
	p.Timestamp = p.Timestamp - t.first + s.tsBase + uint32(pass)*span
	p.SequenceNumber += s.seqBase + uint16(pass*t.count)
	p.SSRC = s.AudioSSRC
	if t == &rec.Video {
		p.SSRC = s.VideoSSRC
		if dd := p.GetExtension(rec.DDExtension); len(dd) >= 3 {
			dd = append([]byte(nil), dd...)
			n := binary.BigEndian.Uint16(dd[1:]) + s.frameBase + uint16(pass)*t.frames
			binary.BigEndian.PutUint16(dd[1:], n)
			if err := p.SetExtension(rec.DDExtension, dd); err != nil {
				return nil, 0, err
			}
		}
	}
	b, err := p.Marshal()
	return b, time.Duration(pass)*rec.Span + src.At, err
}
