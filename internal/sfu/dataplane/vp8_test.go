package dataplane

import (
	"bytes"
	"testing"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// A VP8 descriptor's picture numbering is read only with a 15-bit
// PictureID, wherever its optional bytes put TL0PICIDX and KEYIDX, and
// written back without touching anything else (S, the partition index,
// TID, Y, the payload header).
func TestVP8Pictures(t *testing.T) {
	all := uint8(layers.VP8Picture | layers.VP8TL0 | layers.VP8KeyIdx)
	for _, c := range []struct {
		name    string
		payload []byte
		want    layers.VP8
	}{
		{"I L T K", []byte{0x90, 0xf0, 0x81, 0x02, 0x33, 0x65, 0x00, 0}, layers.VP8{Picture: 0x102, TL0: 0x33, KeyIdx: 5, Fields: all}},
		{"I T K", []byte{0x90, 0xb0, 0xff, 0xff, 0x4a, 0x9d, 0, 0}, layers.VP8{Picture: 0x7fff, KeyIdx: 0x0a, Fields: layers.VP8Picture | layers.VP8KeyIdx}},
		{"I L", []byte{0x80, 0xc0, 0x80, 0x00, 0xff, 0x9d, 0, 0}, layers.VP8{TL0: 0xff, Fields: layers.VP8Picture | layers.VP8TL0}},
		{"I L T", []byte{0x90, 0xe0, 0xab, 0xcd, 0x07, 0x9f, 0x9d}, layers.VP8{Picture: 0x2bcd, TL0: 7, Fields: layers.VP8Picture | layers.VP8TL0}},
		{"I T", []byte{0x90, 0xa0, 0x80, 0x01, 0x5f, 0x9d}, layers.VP8{Picture: 1, Fields: layers.VP8Picture}},
		{"I K", []byte{0x90, 0x90, 0x80, 0x02, 0x13, 0x9d}, layers.VP8{Picture: 2, KeyIdx: 0x13, Fields: layers.VP8Picture | layers.VP8KeyIdx}},
		{"I", []byte{0x90, 0x80, 0x80, 0x03}, layers.VP8{Picture: 3, Fields: layers.VP8Picture}},
		{"I L, the word at 4 not whole", []byte{0x90, 0xc0, 0x80, 0x03, 0x09}, layers.VP8{}},
		{"L T without I", []byte{0x90, 0x60, 0x81, 0x02, 0x33, 0x65, 0, 0}, layers.VP8{}},
		{"7-bit PictureID", []byte{0x90, 0xe0, 0x12, 0x33, 0x40, 0x9d, 0, 0}, layers.VP8{}},
		{"no I", []byte{0x90, 0x60, 0x33, 0x40, 0x9d, 0, 0, 0}, layers.VP8{}},
		{"no X", []byte{0x10, 0x9d, 0x01, 0x2a, 0, 0, 0, 0}, layers.VP8{}},
		{"short", []byte{0x90, 0xf0, 0x81, 0x02, 0x33}, layers.VP8{}},
	} {
		got := VP8PicturesOf(c.payload)
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
			continue
		}
		if got.Fields == 0 {
			continue
		}
		out := bytes.Clone(c.payload)
		next := layers.VP8{Picture: 0x1234, TL0: 0x77, KeyIdx: 0x1e, Fields: got.Fields}
		putVP8Pictures(out, next)
		if back := VP8PicturesOf(out); back != next.Shifted(layers.VP8{}) {
			t.Errorf("%s: wrote %+v, read back %+v", c.name, next, back)
		}
		// Only the numbers' bits changed.
		mask := map[string][]byte{
			"I L T K": {0, 0, 0x7f, 0xff, 0xff, 0x1f},
			"I T K":   {0, 0, 0x7f, 0xff, 0x1f, 0},
			"I L":     {0, 0, 0x7f, 0xff, 0xff, 0},
			"I L T":   {0, 0, 0x7f, 0xff, 0xff, 0},
			"I T":     {0, 0, 0x7f, 0xff, 0, 0}, // (its reserved KEYIDX bits untouched)
			"I K":     {0, 0, 0x7f, 0xff, 0x1f, 0},
			"I":       {0, 0, 0x7f, 0xff},
		}[c.name]
		for i := range out {
			var m byte
			if i < len(mask) {
				m = mask[i]
			}
			if out[i]&^m != c.payload[i]&^m {
				t.Errorf("%s: byte %d %#x became %#x", c.name, i, c.payload[i], out[i])
			}
		}
	}
}

// A VP8 packet answered from the history to a simulcast receiver carries
// the picture numbering it was sent with, as its other numbers do.
func TestAsReceivedVP8(t *testing.T) {
	e := &simulcastEncoding{rid: "q", ssrc: 1111, seq: 10, ts: 5000, keyEvery: 10, noDD: true, vp8: true, picture: 32767, tl0: 255, keyIdx: 31}
	p := e.nextFrame(t)[0]
	before := VP8PicturesOf(Classify(p).Payload)
	shift := layers.Numbers{TS: 100, VP8: layers.VP8{Picture: 2, TL0: 3, KeyIdx: 4}}
	sim := &Simulcast{SSRC: 0x5151}
	asReceived(p, sim, encodingFormat{codec: VP8}, 10, shift)
	got := VP8PicturesOf(Classify(p).Payload)
	want := layers.VP8{Picture: 1, TL0: 3, KeyIdx: 4, Fields: before.Fields}             // (the picture wrapped)
	if got != want || before.Picture != 32767 || before.TL0 != 0 || before.KeyIdx != 0 { // (the first picture's TL0PICIDX and KEYIDX wrapped)
		t.Errorf("sent %+v as %+v, want %+v", before, got, want)
	}
	if Classify(p).Payload == nil || p[2] != 0 || p[3] != 10 {
		t.Errorf("sequence number % x, want 10", p[2:4])
	}
}
