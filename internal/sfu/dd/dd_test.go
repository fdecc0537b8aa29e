package dd

import (
	"encoding/binary"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// capturedDescriptors are the dependency descriptors of the captured
// Chromium AV1 stream (L1T3), in order.
func capturedDescriptors(t testing.TB) [][]byte {
	t.Helper()
	rec, err := synth.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	return descriptorsOf(t, rec.Packets, rec.Video.SSRC, rec.DDExtension)
}

// switchingCapture is the video of one Chromium participant whose encoder
// went through switchingSchedule, 4 s a step (TestCaptureChromiumStream in
// internal/sfu recorded it with -capture-video-only). It is read from the
// file, not embedded in package synth, which the product links.
const switchingCapture = "../../testbed/synth/testdata/chromium-av1-switching.rtpdump"

// switchingSchedule is the capture's meeting.mjs SCHEDULE.
const switchingSchedule = "L1T3,L1T2,L1T3,L1T1,L1T3,L1T3/2"

// switchingDescriptors are the dependency descriptors of switchingCapture,
// in order.
func switchingDescriptors(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open(switchingCapture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := synth.ReadRTPDump(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) == 0 {
		t.Fatal("an empty capture")
	}
	return descriptorsOf(t, pkts, binary.BigEndian.Uint32(pkts[0].Data[8:]), synth.DDExtensionID)
}

// descriptorsOf are the dependency descriptors (extension id ext) of the
// packets of ssrc, in order. Chromium's padding-only packets (bandwidth
// probes) carry none; every other packet must.
func descriptorsOf(t testing.TB, pkts []synth.Packet, ssrc uint32, ext uint8) [][]byte {
	t.Helper()
	var out [][]byte
	for _, pkt := range pkts {
		var p rtp.Packet
		if err := p.Unmarshal(pkt.Data); err != nil {
			t.Fatal(err)
		}
		if p.SSRC != ssrc {
			continue
		}
		b := p.GetExtension(ext)
		if b == nil && len(p.Payload) == 0 && p.Padding {
			continue
		}
		if b == nil {
			t.Fatalf("video packet %d (%d payload bytes, padding %v, extensions %v) without a dependency descriptor",
				p.SequenceNumber, len(p.Payload), p.Padding, p.GetExtensionIDs())
		}
		out = append(out, b)
	}
	return out
}

// walk parses a stream's descriptors in order, each against the structure
// in force, and checks what holds of every Chromium stream: structures
// come on key frames' first packets; every template id lies in [offset,
// offset+templates) mod 64 of the structure in force and names that
// template; frames start and end once each and their numbers run on; each
// descriptor round-trips through Marshal. It returns the structures
// attached, in order, and the number of frames.
func walk(t *testing.T, descs [][]byte) (structures []*Structure, frames int) {
	t.Helper()
	var in *Structure
	var open bool
	var last uint16
	for i, b := range descs {
		d, err := Parse(b, in)
		if err != nil {
			t.Fatalf("descriptor %d (% x): %v", i, b, err)
		}
		if d.Structure != nil {
			structures = append(structures, d.Structure)
			in = d.Structure
			if !d.StartOfFrame {
				t.Errorf("descriptor %d: a structure not on a frame's first packet", i)
			}
			if tp, ok := in.Template(d.TemplateID); !ok || len(tp.FrameDiffs) != 0 {
				t.Errorf("descriptor %d: a structure attached by a frame of template id %d, not a key frame", i, d.TemplateID)
			}
		}
		if in == nil {
			t.Fatalf("descriptor %d before any structure", i)
		}
		if k := (d.TemplateID - in.IDOffset + MaxTemplates) % MaxTemplates; k >= len(in.Templates) {
			t.Errorf("descriptor %d: template id %d outside [%d, %d+%d) mod 64", i, d.TemplateID, in.IDOffset, in.IDOffset, len(in.Templates))
		} else if tp, ok := in.Template(d.TemplateID); !ok || tp != &in.Templates[k] {
			t.Errorf("descriptor %d: template id %d names %v, want template %d", i, d.TemplateID, tp, k)
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
	return structures, frames
}

func dtis(t Template) string {
	var b strings.Builder
	for _, d := range t.DTIs {
		b.WriteString(d.String())
	}
	return b.String()
}

// layout is a structure in short: its offset, decode targets, chains,
// resolutions and each template's temporal id and DTIs ("T1 -DS").
func layout(s *Structure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "offset %d, %d decode targets, %d chains, resolutions %v:", s.IDOffset, s.DecodeTargets, s.Chains, s.Resolutions)
	for _, tp := range s.Templates {
		fmt.Fprintf(&b, " T%d %s", tp.TemporalID, dtis(tp))
	}
	return b.String()
}

// Chromium's L1T3 as the issue found it: 3 decode targets, 1 chain, 5
// templates (T0 key SSS, T0 SSS, T1 -DS, T2 --D, T2 --D), attached to key
// frames' first packets; every packet's descriptor parses against the
// structure in force, frames start and end once each, frame numbers run
// on, and each round-trips through Marshal.
func TestChromiumL1T3(t *testing.T) {
	structures, frames := walk(t, capturedDescriptors(t))
	for _, s := range structures {
		got := []string{}
		for _, tp := range s.Templates {
			got = append(got, dtis(tp))
		}
		want := []string{"SSS", "SSS", "-DS", "--D", "--D"}
		if s.DecodeTargets != 3 || s.Chains != 1 || !reflect.DeepEqual(got, want) {
			t.Fatalf("structure: %d decode targets, %d chains, templates %v; want 3, 1, %v", s.DecodeTargets, s.Chains, got, want)
		}
		layers := []int{s.Templates[0].TemporalID, s.Templates[1].TemporalID, s.Templates[2].TemporalID,
			s.Templates[3].TemporalID, s.Templates[4].TemporalID}
		if !reflect.DeepEqual(layers, []int{0, 0, 1, 2, 2}) {
			t.Errorf("temporal ids %v", layers)
		}
	}
	if len(structures) < 2 || frames < 150 { // 12 s at 15 fps, two key frames
		t.Errorf("%d structures over %d frames", len(structures), frames)
	}
	t.Logf("%d frames, %d structures", frames, len(structures))
}

// Chromium through switchingSchedule: each step's setParameters brings a
// key frame with a new structure (3, 2, 3, 1, 3, 3 decode targets; the
// last at half the resolution), whose template id offset moves on past
// the previous structure's templates, (offset + templates) mod 64: 0, 5,
// 8, 13, 15, 20; a key frame that changes nothing would repeat the
// structure in force. Every descriptor parses against the structure in
// force, its template id in that structure's range; frame numbers run on
// across the switches; each round-trips through Marshal.
func TestChromiumStructureChanges(t *testing.T) {
	steps := strings.Split(switchingSchedule, ",")
	want := []*Structure{l1t3(0), l1t2(5), l1t3(8), l1t1(13), l1t3(15), l1t3(20)}
	for i, s := range want {
		s.Resolutions = [][2]int{{320, 180}}
		if strings.HasSuffix(steps[i], "/2") {
			s.Resolutions = [][2]int{{160, 90}}
		}
	}
	structures, frames := walk(t, switchingDescriptors(t))
	var changes []*Structure
	for _, s := range structures {
		if n := len(changes); n > 0 && reflect.DeepEqual(s, changes[n-1]) {
			continue // a key frame on request: the structure in force again
		}
		changes = append(changes, s)
		t.Logf("structure %d: %s", len(changes)-1, layout(s))
	}
	for i := 1; i < len(changes); i++ {
		prev := changes[i-1]
		if next := (prev.IDOffset + len(prev.Templates)) % MaxTemplates; changes[i].IDOffset != next {
			t.Errorf("structure %d: offset %d after offset %d with %d templates, want %d",
				i, changes[i].IDOffset, prev.IDOffset, len(prev.Templates), next)
		}
	}
	if len(changes) != len(want) {
		t.Fatalf("%d structures, want %d: one per step of %s", len(changes), len(want), switchingSchedule)
	}
	for i, s := range changes {
		if !reflect.DeepEqual(s, want[i]) {
			t.Errorf("structure %d (%s):\n %s\nwant\n %s", i, steps[i], layout(s), layout(want[i]))
		}
	}
	if frames < 300 { // 24 s at 15 fps
		t.Errorf("%d frames", frames)
	}
	t.Logf("%d frames, %d structures, %d changes", frames, len(structures), len(changes))
}

// dti reads DTIs written as their letters, e.g. "-DS".
func dti(s string) []DTI {
	var out []DTI
	for _, c := range s {
		out = append(out, DTI(strings.IndexRune("-DSR", c)))
	}
	return out
}

// l1t3 is Chromium's L1T3 structure with the template id offset given (no
// resolutions): T0 key SSS, T0 SSS on the last T0, T1 -DS on it, T2 --D
// on the T0 before and on the T1 before.
func l1t3(offset int) *Structure {
	return &Structure{IDOffset: offset, DecodeTargets: 3, Chains: 1, ProtectedBy: []int{0, 0, 0},
		Templates: []Template{
			{TemporalID: 0, DTIs: dti("SSS"), FrameDiffs: []int{}, ChainDiffs: []int{0}},
			{TemporalID: 0, DTIs: dti("SSS"), FrameDiffs: []int{4}, ChainDiffs: []int{4}},
			{TemporalID: 1, DTIs: dti("-DS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
			{TemporalID: 2, DTIs: dti("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
			{TemporalID: 2, DTIs: dti("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{3}},
		}}
}

// l1t2 is Chromium's L1T2 as captured: T0 key SS, T0 SS on the last T0,
// T1 -D on it.
func l1t2(offset int) *Structure {
	return &Structure{IDOffset: offset, DecodeTargets: 2, Chains: 1, ProtectedBy: []int{0, 0},
		Templates: []Template{
			{TemporalID: 0, DTIs: dti("SS"), FrameDiffs: []int{}, ChainDiffs: []int{0}},
			{TemporalID: 0, DTIs: dti("SS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
			{TemporalID: 1, DTIs: dti("-D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
		}}
}

// l1t1 is Chromium's L1T1 (no layering) as captured: a key frame S, then
// frames S on the last one.
func l1t1(offset int) *Structure {
	return &Structure{IDOffset: offset, DecodeTargets: 1, Chains: 1, ProtectedBy: []int{0},
		Templates: []Template{
			{TemporalID: 0, DTIs: dti("S"), FrameDiffs: []int{}, ChainDiffs: []int{0}},
			{TemporalID: 0, DTIs: dti("S"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
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
	for _, b := range switchingDescriptors(f) { // its structures
		if len(b) > 3 && b[3]&0x80 != 0 {
			f.Add(b, false)
		}
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
