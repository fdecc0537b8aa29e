package dataplane

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Codec is the video payload format of one of a sender's SSRCs, by which
// the data planes see where a key frame starts (bpf/video.h, enum
// video_codec): a receiver that joins mid-stream gets the sender's video
// from its next key frame on, not undecodable frames before it.
type Codec uint8

// In the order of enum video_codec.
const (
	NoVideo Codec = iota // audio: never held back
	AV1
	VP8
	VP9
	H264
)

var codecNames = [...]string{"", "AV1", "VP8", "VP9", "H264"}

func (c Codec) String() string {
	if int(c) < len(codecNames) && c != NoVideo {
		return codecNames[c]
	}
	if c == NoVideo {
		return "none"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// VideoCodec is the codec of an rtpmap encoding name (case-insensitive),
// or false when the data planes cannot see its key frames.
func VideoCodec(name string) (Codec, bool) {
	for c := AV1; int(c) < len(codecNames); c++ {
		if strings.EqualFold(name, codecNames[c]) {
			return c, true
		}
	}
	return NoVideo, false
}

// Source is one SSRC a sender sends, and its video codec (NoVideo for audio).
type Source struct {
	SSRC  uint32
	Video Codec
	// DDExt is the header extension id of the stream's AV1 dependency
	// descriptor (0: none): with it, each receiver's layers adapt.
	DDExt uint8
	// TWCCExt is the header extension id of the sender's transport-wide
	// sequence number (0: none): each leg with transport-wide numbers gets
	// its own in its replicas.
	TWCCExt uint8
	// History: the source's packets are kept (one source of a stream: its
	// video), so the SFU answers its receivers' NACKs, and what it
	// forwarded goes to nobody twice.
	History bool
	// LevelExt is the header extension id of the audio level (RFC 6464;
	// 0: none) of an audio source: its levels are added up for speakers
	// (AudioLevels).
	LevelExt uint8
	// Simulcast, for a video sent as several encodings (RFC 8853): the
	// source with SSRC 0 stands for all of them, and each encoding's SSRC
	// is learnt from its stream id as its first packets arrive; Encoding
	// is a learnt source's place in Simulcast.RIDs.
	Simulcast *Simulcast
	Encoding  uint8
	// RTX is the sender's retransmission stream of this (video) source,
	// if it sends one (nil: it was not asked for one).
	RTX *RTX
}

// Simulcast is how a sender's encodings of one video are told apart and
// forwarded: each receiver takes one, under one SSRC of the SFU's.
type Simulcast struct {
	RIDExt uint8    // header extension id of the RTP stream id (RFC 8852)
	RIDs   []string // the encodings' stream ids, lowest first (at most layers.MaxEncodings)
	SSRC   uint32   // what receivers get every encoding as
}

// encodingOf is the encoding an RTP packet's stream id names, if any.
func (s *Simulcast) encodingOf(p []byte, hdr int) (uint8, bool) {
	return s.encodingNamed(p, hdr, s.RIDExt)
}

// encodingNamed is the encoding a stream id in header extension ext
// names (the stream id, or a retransmission's repaired stream id), if any.
func (s *Simulcast) encodingNamed(p []byte, hdr int, ext uint8) (uint8, bool) {
	off, n := rtpExtensionAt(p, hdr, ext)
	if off <= 0 || n == 0 {
		return 0, false
	}
	rid := string(p[off : off+n])
	for i, want := range s.RIDs {
		if want == rid {
			return uint8(i), true
		}
	}
	return 0, false
}

// VP8PicturesOf is the picture numbering of a VP8 payload's descriptor
// (RFC 7741 4.2), as bpf/video.h reads it: only with a 15-bit PictureID
// (what browsers send), and only of a payload of 4 bytes or more, 6 where
// the descriptor carries TL0PICIDX or TID/KEYIDX (the word at offset 4 is
// rewritten whole; a real payload always has that much).
func VP8PicturesOf(payload []byte) layers.VP8 {
	p := payload
	if len(p) < 4 || p[0]&0x80 == 0 || p[1]&0x80 == 0 || p[2]&0x80 == 0 || (p[1]&0x70 != 0 && len(p) < 6) {
		return layers.VP8{}
	}
	v := layers.VP8{Picture: uint16(p[2]&0x7f)<<8 | uint16(p[3]), Fields: layers.VP8Picture}
	tk := 4
	if p[1]&0x40 != 0 {
		v.TL0, v.Fields, tk = p[4], v.Fields|layers.VP8TL0, 5
	}
	if p[1]&0x10 != 0 {
		v.KeyIdx, v.Fields = p[tk]&0x1f, v.Fields|layers.VP8KeyIdx
	}
	return v
}

// putVP8Pictures writes v into the descriptor of payload, which carries
// the fields v does (VP8PicturesOf of it).
func putVP8Pictures(payload []byte, v layers.VP8) {
	if v.Fields&layers.VP8Picture == 0 || len(payload) < 4 {
		return
	}
	binary.BigEndian.PutUint16(payload[2:], 0x8000|v.Picture)
	tk := 4
	if v.Fields&layers.VP8TL0 != 0 && tk < len(payload) {
		payload[tk] = v.TL0
		tk++
	}
	if v.Fields&layers.VP8KeyIdx != 0 && tk < len(payload) {
		payload[tk] = payload[tk]&0xe0 | v.KeyIdx
	}
}

// videoPeek is how much of the payload the key-frame test reads; shorter
// payloads never start a key frame (VIDEO_PEEK).
const videoPeek = 8

// KeyFrameStart reports whether an RTP payload (padding included) of
// codec c is the first packet of a key frame, as bpf/video.h judges it.
func KeyFrameStart(c Codec, payload []byte) bool {
	if len(payload) < videoPeek {
		return false
	}
	p := payload[:videoPeek]
	switch c {
	case AV1: // aggregation header: N, a new coded video sequence
		return p[0]&0x08 != 0
	case VP8: // S, partition 0, then the payload header's P bit clear
		if p[0]&0x1f != 0x10 {
			return false
		}
		off := 1
		if p[0]&0x80 != 0 {
			off = 2
			if p[1]&0x80 != 0 {
				off += 1 + int(p[2]>>7)
			}
			if p[1]&0x40 != 0 {
				off++
			}
			if p[1]&0x30 != 0 {
				off++
			}
		}
		return p[off]&0x01 == 0
	case VP9: // B set, P clear, spatial layer 0
		if p[0]&0x48 != 0x08 {
			return false
		}
		if p[0]&0x20 == 0 {
			return true
		}
		off := 1
		if p[0]&0x80 != 0 {
			off += 1 + int(p[1]>>7)
		}
		return (p[off]>>1)&0x07 == 0
	case H264: // a sequence parameter set, alone or first in a STAP-A
		t := p[0] & 0x1f
		if t == 24 {
			t = p[3] & 0x1f
		}
		return t == 7
	}
	return false
}
