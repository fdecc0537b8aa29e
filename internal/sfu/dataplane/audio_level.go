package dataplane

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/cilium/ebpf"

	"github.com/ebrtc/ebrtc/internal/addrport"
)

// AudioLevels is what a stream's audio levels (RFC 6464) added up to since
// it began: the SFU ranks speakers on the differences.
type AudioLevels struct {
	Packets  uint64 // audio packets with the element
	Loudness uint64 // sum of 127 - level (-dBov): louder is more
	Voiced   uint64 // with the sender's voice-activity flag
}

// Sub is what a has more than b (the levels between two readings).
func (a AudioLevels) Sub(b AudioLevels) AudioLevels {
	return AudioLevels{Packets: a.Packets - b.Packets, Loudness: a.Loudness - b.Loudness, Voiced: a.Voiced - b.Voiced}
}

// Mean is the mean loudness (0 silence .. 127 full scale), 0 without a
// packet.
func (a AudioLevels) Mean() float64 {
	if a.Packets == 0 {
		return 0
	}
	return float64(a.Loudness) / float64(a.Packets)
}

// AudioLevelOf is the audio level element (id) of RTP packet p: its level
// (0 loudest .. 127 silence) and voice-activity flag, as bpf/audio_level.h
// reads it.
func AudioLevelOf(p []byte, id uint8) (level uint8, voiced, ok bool) {
	off, n := ExtensionOffset(p, id)
	if n < 1 {
		return 0, false, false
	}
	return p[off] & 0x7f, p[off]&0x80 != 0, true
}

// levelCounter adds levels up as bpf/audio_level.h does (the slow path's,
// the user plane's).
type levelCounter struct{ packets, loudness, voiced atomic.Uint64 }

func (c *levelCounter) add(level uint8, voiced bool) {
	c.packets.Add(1)
	c.loudness.Add(uint64(127 - level))
	if voiced {
		c.voiced.Add(1)
	}
}

func (c *levelCounter) load() AudioLevels {
	return AudioLevels{Packets: c.packets.Load(), Loudness: c.loudness.Load(), Voiced: c.voiced.Load()}
}

// hearLevel counts packet p's audio level (source src's) to s, if src is
// audio that carries one.
func hearLevel(s streamState, src Source, p []byte) {
	if src.LevelExt == 0 || src.Video != NoVideo {
		return
	}
	if level, voiced, ok := AudioLevelOf(p, src.LevelExt); ok {
		s.heard(level, voiced)
	}
}

// AudioLevels is what the stream's audio levels added up to: the
// program's, on every CPU, and the slow path's.
func (d *DataPlane) AudioLevels(from netip.AddrPort) (AudioLevels, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.streams[addrport.Unmap(from)]
	if !ok {
		return AudioLevels{}, fmt.Errorf("dataplane: no stream from %v", from)
	}
	var per []sfuAudioLevel
	if err := d.objs.AudioLevels.Lookup(s.id, &per); err != nil {
		return AudioLevels{}, fmt.Errorf("dataplane: audio levels: %w", err)
	}
	a := s.levels.load()
	for _, c := range per {
		a.Packets, a.Loudness, a.Voiced = a.Packets+c.Packets, a.Loudness+c.Loudness, a.Voiced+c.Voiced
	}
	return a, nil
}

// resetAudioLevels zeroes a reused slot's levels.
func (d *DataPlane) resetAudioLevels(id uint32) error {
	return d.objs.AudioLevels.Put(id, make([]sfuAudioLevel, ebpf.MustPossibleCPU()))
}

// AudioLevels is what the stream's audio levels added up to.
func (u *User) AudioLevels(from netip.AddrPort) (AudioLevels, error) {
	s, err := u.streamFrom(from)
	if err != nil {
		return AudioLevels{}, err
	}
	return s.video.levels.load(), nil
}
