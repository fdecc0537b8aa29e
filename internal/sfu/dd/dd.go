// Package dd reads and writes the AV1 RTP dependency descriptor (the AV1 RTP
// payload specification, appendix A): which decode targets a frame serves,
// so that an SFU can drop temporal or spatial layers per receiver.
//
// A packet carries the mandatory fields (start and end of frame, template
// id, frame number); the first packet of a key frame also carries the
// template dependency structure, which later packets refer to by template
// id. Parse needs the structure in force (nil for a packet that attaches
// one).
package dd

import (
	"errors"
	"fmt"
)

// DTI is a frame's decode target indication for one decode target.
type DTI uint8

const (
	NotPresent  DTI = 0 // the frame is not in the decode target
	Discardable DTI = 1 // in it, and no later frame of it depends on this one
	Switch      DTI = 2 // in it, and a decoder may join the target here
	Required    DTI = 3 // in it, and needed by later frames
)

// String is the spec's letter: -, D, S, R.
func (d DTI) String() string { return string("-DSR"[d&3]) }

// MaxTemplates and the like are the spec's bounds.
const (
	MaxTemplates     = 64
	MaxDecodeTargets = 32
	MaxSpatialLayers = 4
	MaxTemporal      = 8
)

// Template is one frame template of a structure.
type Template struct {
	SpatialID, TemporalID int
	DTIs                  []DTI // per decode target
	FrameDiffs            []int // the frames (by number difference) it depends on
	ChainDiffs            []int // per chain
}

// Structure is a template dependency structure.
type Structure struct {
	// IDOffset is the template id of Templates[0]; ids run on mod 64.
	IDOffset      int
	DecodeTargets int
	Templates     []Template
	// Chains is the number of chains; ProtectedBy the chain protecting
	// each decode target (when Chains > 0).
	Chains      int
	ProtectedBy []int
	// Resolutions are the spatial layers' maximum render sizes, if sent.
	Resolutions [][2]int
}

// Template is the template a template id names, or false if the id is
// outside the structure's range.
func (s *Structure) Template(id int) (*Template, bool) {
	i := (id - s.IDOffset + MaxTemplates) % MaxTemplates
	if id < 0 || id >= MaxTemplates || i >= len(s.Templates) {
		return nil, false
	}
	return &s.Templates[i], true
}

// Descriptor is one packet's dependency descriptor.
type Descriptor struct {
	StartOfFrame, EndOfFrame bool
	TemplateID               int
	FrameNumber              uint16
	// Structure, if this packet attaches one (a key frame's first packet).
	Structure *Structure
	// ActiveDecodeTargets, if the packet says which are active (bit i for
	// decode target i); a new structure makes all of them active.
	ActiveDecodeTargets *uint32
	// The frame's own values where they differ from its template's.
	CustomDTIs       []DTI
	CustomFrameDiffs []int
	CustomChainDiffs []int
}

// DTIs is the frame's decode target indications: custom ones if sent, else
// its template's in s.
func (d *Descriptor) DTIs(s *Structure) ([]DTI, error) {
	if d.CustomDTIs != nil {
		return d.CustomDTIs, nil
	}
	t, ok := s.Template(d.TemplateID)
	if !ok {
		return nil, fmt.Errorf("dd: template id %d outside the structure (offset %d, %d templates)", d.TemplateID, s.IDOffset, len(s.Templates))
	}
	return t.DTIs, nil
}

// Errors of Parse.
var (
	ErrShort       = errors.New("dd: descriptor shorter than its fields")
	ErrNoStructure = errors.New("dd: extended fields without a structure in force")
	ErrInvalid     = errors.New("dd: invalid descriptor")
)

// Parse reads a descriptor (the header extension's payload). in is the
// structure in force, used when the packet sends custom values or an
// active decode target mask, which are sized by it; a structure the
// packet attaches takes its place.
func Parse(b []byte, in *Structure) (*Descriptor, error) {
	r := reader{b: b}
	d := &Descriptor{StartOfFrame: r.bit() == 1, EndOfFrame: r.bit() == 1, TemplateID: int(r.bits(6)),
		FrameNumber: uint16(r.bits(16))}
	if r.err != nil {
		return nil, ErrShort
	}
	if len(b) == 3 {
		return d, nil
	}
	structurePresent, activePresent := r.bit() == 1, r.bit() == 1
	customDTIs, customFdiffs, customChains := r.bit() == 1, r.bit() == 1, r.bit() == 1
	if structurePresent {
		s, err := readStructure(&r)
		if err != nil {
			return nil, err
		}
		d.Structure, in = s, s
		all := uint32(1)<<s.DecodeTargets - 1
		d.ActiveDecodeTargets = &all
	}
	if in == nil && (activePresent || customDTIs || customFdiffs || customChains) {
		return nil, ErrNoStructure
	}
	if activePresent {
		mask := r.bits(in.DecodeTargets)
		d.ActiveDecodeTargets = &mask
	}
	if in != nil {
		if _, ok := in.Template(d.TemplateID); !ok {
			return nil, fmt.Errorf("%w: template id %d outside the structure", ErrInvalid, d.TemplateID)
		}
	}
	if customDTIs {
		d.CustomDTIs = make([]DTI, in.DecodeTargets)
		for i := range d.CustomDTIs {
			d.CustomDTIs[i] = DTI(r.bits(2))
		}
	}
	if customFdiffs {
		d.CustomFrameDiffs = []int{}
		for size := r.bits(2); size != 0 && r.err == nil; size = r.bits(2) {
			d.CustomFrameDiffs = append(d.CustomFrameDiffs, int(r.bits(4*int(size)))+1)
		}
	}
	if customChains {
		d.CustomChainDiffs = make([]int, in.Chains)
		for i := range d.CustomChainDiffs {
			d.CustomChainDiffs[i] = int(r.bits(8))
		}
	}
	if r.err != nil {
		return nil, ErrShort
	}
	return d, nil
}

func readStructure(r *reader) (*Structure, error) {
	s := &Structure{IDOffset: int(r.bits(6)), DecodeTargets: int(r.bits(5)) + 1}
	// Template layers: each template's spatial and temporal id.
	spatial, temporal := 0, 0
	for {
		if len(s.Templates) == MaxTemplates {
			return nil, fmt.Errorf("%w: over %d templates", ErrInvalid, MaxTemplates)
		}
		s.Templates = append(s.Templates, Template{SpatialID: spatial, TemporalID: temporal})
		next := r.bits(2)
		if r.err != nil {
			return nil, ErrShort
		}
		if next == 3 {
			break
		}
		switch next {
		case 1:
			temporal++
		case 2:
			temporal, spatial = 0, spatial+1
		}
		if temporal >= MaxTemporal || spatial >= MaxSpatialLayers {
			return nil, fmt.Errorf("%w: layer ids out of range", ErrInvalid)
		}
	}
	for i := range s.Templates {
		t := &s.Templates[i]
		t.DTIs = make([]DTI, s.DecodeTargets)
		for dt := range t.DTIs {
			t.DTIs[dt] = DTI(r.bits(2))
		}
	}
	for i := range s.Templates {
		t := &s.Templates[i]
		t.FrameDiffs = []int{}
		for r.bit() == 1 && r.err == nil {
			t.FrameDiffs = append(t.FrameDiffs, int(r.bits(4))+1)
		}
	}
	s.Chains = int(r.ns(uint32(s.DecodeTargets) + 1))
	if s.Chains > 0 {
		s.ProtectedBy = make([]int, s.DecodeTargets)
		for dt := range s.ProtectedBy {
			s.ProtectedBy[dt] = int(r.ns(uint32(s.Chains)))
		}
		for i := range s.Templates {
			t := &s.Templates[i]
			t.ChainDiffs = make([]int, s.Chains)
			for c := range t.ChainDiffs {
				t.ChainDiffs[c] = int(r.bits(4))
			}
		}
	}
	if r.bit() == 1 {
		for range s.Templates[len(s.Templates)-1].SpatialID + 1 {
			s.Resolutions = append(s.Resolutions, [2]int{int(r.bits(16)) + 1, int(r.bits(16)) + 1})
		}
	}
	if r.err != nil {
		return nil, ErrShort
	}
	return s, nil
}

// reader reads bits, most significant first; past the end it records
// ErrShort and reads zeros.
type reader struct {
	b   []byte
	pos int // in bits
	err error
}

func (r *reader) bit() uint32 {
	if r.pos >= 8*len(r.b) {
		r.err = ErrShort
		return 0
	}
	v := uint32(r.b[r.pos/8]>>(7-r.pos%8)) & 1
	r.pos++
	return v
}

func (r *reader) bits(n int) uint32 {
	var v uint32
	for range n {
		v = v<<1 | r.bit()
	}
	return v
}

// ns reads the spec's non-symmetric unsigned value below n.
func (r *reader) ns(n uint32) uint32 {
	w := 0
	for x := n; x != 0; x >>= 1 {
		w++
	}
	m := uint32(1)<<w - n
	v := r.bits(w - 1)
	if v < m {
		return v
	}
	return v<<1 - m + r.bit()
}

// Marshal writes the descriptor as Parse reads it; in is the structure in
// force (sizing custom values and the active mask) when d attaches none.
// It writes the extended fields only when d has any.
func (d *Descriptor) Marshal(in *Structure) ([]byte, error) {
	var w writer
	w.bit(d.StartOfFrame)
	w.bit(d.EndOfFrame)
	w.bits(uint32(d.TemplateID), 6)
	w.bits(uint32(d.FrameNumber), 16)
	if d.TemplateID < 0 || d.TemplateID >= MaxTemplates {
		return nil, fmt.Errorf("%w: template id %d", ErrInvalid, d.TemplateID)
	}
	active := d.ActiveDecodeTargets != nil && (d.Structure == nil || *d.ActiveDecodeTargets != uint32(1)<<d.Structure.DecodeTargets-1)
	if d.Structure == nil && !active && d.CustomDTIs == nil && d.CustomFrameDiffs == nil && d.CustomChainDiffs == nil {
		return w.b, nil
	}
	w.bit(d.Structure != nil)
	w.bit(active)
	w.bit(d.CustomDTIs != nil)
	w.bit(d.CustomFrameDiffs != nil)
	w.bit(d.CustomChainDiffs != nil)
	if d.Structure != nil {
		if err := writeStructure(&w, d.Structure); err != nil {
			return nil, err
		}
		in = d.Structure
	}
	if in == nil {
		return nil, ErrNoStructure
	}
	if active {
		w.bits(*d.ActiveDecodeTargets, in.DecodeTargets)
	}
	if d.CustomDTIs != nil {
		if len(d.CustomDTIs) != in.DecodeTargets {
			return nil, fmt.Errorf("%w: %d custom DTIs for %d decode targets", ErrInvalid, len(d.CustomDTIs), in.DecodeTargets)
		}
		for _, v := range d.CustomDTIs {
			w.bits(uint32(v), 2)
		}
	}
	if d.CustomFrameDiffs != nil {
		for _, f := range d.CustomFrameDiffs {
			size := 1
			for f-1 >= 1<<(4*size) {
				size++
			}
			if f < 1 || size > 3 {
				return nil, fmt.Errorf("%w: frame diff %d", ErrInvalid, f)
			}
			w.bits(uint32(size), 2)
			w.bits(uint32(f-1), 4*size)
		}
		w.bits(0, 2)
	}
	if d.CustomChainDiffs != nil {
		if len(d.CustomChainDiffs) != in.Chains {
			return nil, fmt.Errorf("%w: %d chain diffs for %d chains", ErrInvalid, len(d.CustomChainDiffs), in.Chains)
		}
		for _, c := range d.CustomChainDiffs {
			w.bits(uint32(c), 8)
		}
	}
	return w.b, nil
}

func writeStructure(w *writer, s *Structure) error {
	if s.IDOffset < 0 || s.IDOffset >= MaxTemplates || s.DecodeTargets < 1 || s.DecodeTargets > MaxDecodeTargets ||
		len(s.Templates) == 0 || len(s.Templates) > MaxTemplates || s.Chains < 0 || s.Chains > s.DecodeTargets {
		return fmt.Errorf("%w: structure out of range", ErrInvalid)
	}
	w.bits(uint32(s.IDOffset), 6)
	w.bits(uint32(s.DecodeTargets-1), 5)
	for i, t := range s.Templates {
		if i == len(s.Templates)-1 {
			w.bits(3, 2)
			break
		}
		switch next := s.Templates[i+1]; {
		case next.SpatialID == t.SpatialID && next.TemporalID == t.TemporalID:
			w.bits(0, 2)
		case next.SpatialID == t.SpatialID && next.TemporalID == t.TemporalID+1:
			w.bits(1, 2)
		case next.SpatialID == t.SpatialID+1 && next.TemporalID == 0:
			w.bits(2, 2)
		default:
			return fmt.Errorf("%w: template %d's layers do not follow template %d's", ErrInvalid, i+1, i)
		}
	}
	for _, t := range s.Templates {
		if len(t.DTIs) != s.DecodeTargets {
			return fmt.Errorf("%w: a template with %d DTIs for %d decode targets", ErrInvalid, len(t.DTIs), s.DecodeTargets)
		}
		for _, v := range t.DTIs {
			w.bits(uint32(v), 2)
		}
	}
	for _, t := range s.Templates {
		for _, f := range t.FrameDiffs {
			if f < 1 || f > 16 {
				return fmt.Errorf("%w: template frame diff %d", ErrInvalid, f)
			}
			w.bit(true)
			w.bits(uint32(f-1), 4)
		}
		w.bit(false)
	}
	w.ns(uint32(s.Chains), uint32(s.DecodeTargets)+1)
	if s.Chains > 0 {
		if len(s.ProtectedBy) != s.DecodeTargets {
			return fmt.Errorf("%w: %d protecting chains for %d decode targets", ErrInvalid, len(s.ProtectedBy), s.DecodeTargets)
		}
		for _, c := range s.ProtectedBy {
			w.ns(uint32(c), uint32(s.Chains))
		}
		for _, t := range s.Templates {
			if len(t.ChainDiffs) != s.Chains {
				return fmt.Errorf("%w: a template with %d chain diffs for %d chains", ErrInvalid, len(t.ChainDiffs), s.Chains)
			}
			for _, c := range t.ChainDiffs {
				w.bits(uint32(c), 4)
			}
		}
	}
	w.bit(s.Resolutions != nil)
	for _, res := range s.Resolutions {
		w.bits(uint32(res[0]-1), 16)
		w.bits(uint32(res[1]-1), 16)
	}
	return nil
}

// writer writes bits, most significant first, padding the last byte.
type writer struct {
	b   []byte
	pos int
}

func (w *writer) bit(v bool) {
	if w.pos%8 == 0 {
		w.b = append(w.b, 0)
	}
	if v {
		w.b[len(w.b)-1] |= 0x80 >> (w.pos % 8)
	}
	w.pos++
}

func (w *writer) bits(v uint32, n int) {
	for i := n - 1; i >= 0; i-- {
		w.bit(v>>i&1 == 1)
	}
}

// ns writes v below n as the reader's ns reads it.
func (w *writer) ns(v, n uint32) {
	width := 0
	for x := n; x != 0; x >>= 1 {
		width++
	}
	m := uint32(1)<<width - n
	if v < m {
		w.bits(v, width-1)
		return
	}
	w.bits((v+m)>>1, width-1)
	w.bit((v+m)&1 == 1)
}
