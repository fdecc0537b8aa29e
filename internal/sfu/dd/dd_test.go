package dd

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/sfu/synth"
)

// capturedDescriptors are the dependency descriptors of the captured
// Chromium AV1 stream (L1T3), in order. Chromium's padding-only packets
// (bandwidth probes) carry none.
func capturedDescriptors(t testing.TB) [][]byte {
	t.Helper()
	rec, err := synth.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, pkt := range rec.Packets {
		var p rtp.Packet
		if err := p.Unmarshal(pkt.Data); err != nil {
			t.Fatal(err)
		}
		if p.SSRC != rec.Video.SSRC {
			continue
		}
		ext := p.GetExtension(rec.DDExtension)
		if ext == nil && len(p.Payload) == 0 && p.Padding {
			continue
		}
		if ext == nil {
			t.Fatalf("video packet %d (%d payload bytes, padding %v, extensions %v) without a dependency descriptor",
				p.SequenceNumber, len(p.Payload), p.Padding, p.GetExtensionIDs())
		}
		out = append(out, ext)
	}
	return out
}

func dtis(t Template) string {
	var b strings.Builder
	for _, d := range t.DTIs {
		b.WriteString(d.String())
	}
	return b.String()
}

// Chromium's L1T3 as the issue found it: 3 decode targets, 1 chain, 5
// templates (T0 key SSS, T0 SSS, T1 -DS, T2 --D, T2 --D), attached to key
// frames' first packets; every packet's descriptor parses against the
// structure in force, frames start and end once each, frame numbers run
// on, and each round-trips through Marshal.
func TestChromiumL1T3(t *testing.T) {
	var in *Structure
	structures, frames := 0, 0
	var open bool
	var last uint16
	for i, b := range capturedDescriptors(t) {
		d, err := Parse(b, in)
		if err != nil {
			t.Fatalf("descriptor %d (% x): %v", i, b, err)
		}
		if d.Structure != nil {
			structures++
			in = d.Structure
			if !d.StartOfFrame {
				t.Errorf("descriptor %d: a structure not on a frame's first packet", i)
			}
			got := []string{}
			for _, tp := range in.Templates {
				got = append(got, dtis(tp))
			}
			want := []string{"SSS", "SSS", "-DS", "--D", "--D"}
			if in.DecodeTargets != 3 || in.Chains != 1 || !reflect.DeepEqual(got, want) {
				t.Errorf("structure: %d decode targets, %d chains, templates %v; want 3, 1, %v", in.DecodeTargets, in.Chains, got, want)
			}
			layers := []int{in.Templates[0].TemporalID, in.Templates[1].TemporalID, in.Templates[2].TemporalID,
				in.Templates[3].TemporalID, in.Templates[4].TemporalID}
			if !reflect.DeepEqual(layers, []int{0, 0, 1, 2, 2}) {
				t.Errorf("temporal ids %v", layers)
			}
		}
		if in == nil {
			t.Fatalf("descriptor %d before any structure", i)
		}
		if _, err := d.DTIs(in); err != nil {
			t.Errorf("descriptor %d: %v", i, err)
		}
		if d.StartOfFrame == open {
			t.Errorf("descriptor %d: start of frame %v with a frame open %v", i, d.StartOfFrame, open)
		}
		if d.StartOfFrame {
			if frames > 0 && d.FrameNumber != last+1 {
				t.Errorf("descriptor %d: frame %d after %d", i, d.FrameNumber, last)
			}
			frames++
			last = d.FrameNumber
		}
		open = !d.EndOfFrame
		out, err := d.Marshal(in)
		if err != nil {
			t.Fatalf("descriptor %d: marshal: %v", i, err)
		}
		again, err := Parse(out, in)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Errorf("descriptor %d: % x round-trips to % x: %+v, %v", i, b, out, again, err)
		}
	}
	if structures < 2 || frames < 150 { // 12 s at 15 fps, two key frames
		t.Errorf("%d structures over %d frames", structures, frames)
	}
	t.Logf("%d frames, %d structures", frames, structures)
}

// l1t3 is Chromium's L1T3 structure with the template id offset given.
func l1t3(offset int) *Structure {
	dti := func(s string) []DTI {
		var out []DTI
		for _, c := range s {
			out = append(out, DTI(strings.IndexRune("-DSR", c)))
		}
		return out
	}
	return &Structure{IDOffset: offset, DecodeTargets: 3, Chains: 1, ProtectedBy: []int{0, 0, 0},
		Templates: []Template{
			{TemporalID: 0, DTIs: dti("SSS"), FrameDiffs: []int{}, ChainDiffs: []int{0}},
			{TemporalID: 0, DTIs: dti("SSS"), FrameDiffs: []int{4}, ChainDiffs: []int{4}},
			{TemporalID: 1, DTIs: dti("-DS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
			{TemporalID: 2, DTIs: dti("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
			{TemporalID: 2, DTIs: dti("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{3}},
		}}
}

// Template ids run on mod 64 from the structure's offset: after the
// switches the issue saw (offsets 0, 5, 8) and across the wrap, the id of
// template i names template i, and ids outside the range name none (the
// `templateId % 5` rule gets ids 8-12 wrong).
func TestTemplateIDsFollowTheOffset(t *testing.T) {
	for _, offset := range []int{0, 5, 8, 61, 63} {
		s := l1t3(offset)
		for i := range s.Templates {
			id := (offset + i) % MaxTemplates
			tp, ok := s.Template(id)
			if !ok || tp != &s.Templates[i] {
				t.Errorf("offset %d: id %d names %v, want template %d", offset, id, tp, i)
			}
			d := &Descriptor{StartOfFrame: true, TemplateID: id, FrameNumber: 7}
			got, err := d.DTIs(s)
			if err != nil || !reflect.DeepEqual(got, s.Templates[i].DTIs) {
				t.Errorf("offset %d: id %d's DTIs %v, %v", offset, id, got, err)
			}
		}
		for _, id := range []int{(offset + 5) % 64, (offset + 63) % 64, -1, 64} {
			if _, ok := s.Template(id); ok {
				t.Errorf("offset %d: id %d names a template", offset, id)
			}
		}
		// A structure attached with this offset reads back the same.
		d := &Descriptor{StartOfFrame: true, TemplateID: offset, FrameNumber: 65535, Structure: s}
		b, err := d.Marshal(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(b, nil)
		if err != nil || !reflect.DeepEqual(got.Structure, s) {
			t.Errorf("offset %d: structure reads back as %+v, %v", offset, got.Structure, err)
		}
	}
}

// Custom values, an active decode target mask and resolutions round-trip;
// custom values without a structure in force are refused, as are ids
// outside it and descriptors cut short.
func TestExtendedFields(t *testing.T) {
	s := l1t3(8)
	s.Resolutions = [][2]int{{320, 180}}
	mask := uint32(0b011)
	withStructure := &Descriptor{StartOfFrame: true, EndOfFrame: true, TemplateID: 8, FrameNumber: 1, Structure: s, ActiveDecodeTargets: &mask}
	custom := &Descriptor{TemplateID: 10, FrameNumber: 2, CustomDTIs: []DTI{NotPresent, Discardable, Switch},
		CustomFrameDiffs: []int{1, 17, 300}, CustomChainDiffs: []int{200}}
	for _, d := range []*Descriptor{withStructure, custom} {
		b, err := d.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(b, s)
		if err != nil || !reflect.DeepEqual(got, d) {
			t.Errorf("%+v reads back as %+v, %v", d, got, err)
		}
		if _, err := Parse(b, nil); d.Structure == nil && err != ErrNoStructure {
			t.Errorf("custom values without a structure: %v", err)
		}
		for n := range len(b) {
			if n == 3 {
				continue // the mandatory fields alone are a descriptor
			}
			if _, err := Parse(b[:n], s); err == nil {
				t.Errorf("% x cut to %d bytes parsed", b, n)
			}
		}
	}
	if _, err := Parse([]byte{0x80 | 13, 0, 1, 0}, s); err == nil {
		t.Error("template id 13, outside offset 8's five, parsed")
	}
}

// Parse never panics, and what it accepts round-trips.
func FuzzParse(f *testing.F) {
	for _, b := range capturedDescriptors(f)[:40] {
		f.Add(b, true)
	}
	f.Add([]byte{0x80, 0, 1}, false)
	f.Fuzz(func(t *testing.T, b []byte, withStructure bool) {
		var in *Structure
		if withStructure {
			in = l1t3(0)
		}
		d, err := Parse(b, in)
		if err != nil {
			return
		}
		if d.Structure != nil {
			in = d.Structure
		}
		out, err := d.Marshal(in)
		if err != nil {
			t.Fatalf("% x parsed as %+v but does not marshal: %v", b, d, err)
		}
		again, err := Parse(out, in)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("% x: %+v round-trips to %+v, %v", b, d, again, err)
		}
	})
}
