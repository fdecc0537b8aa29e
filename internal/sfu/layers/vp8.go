package layers

// VP8 is the picture numbering of a VP8 payload descriptor (RFC 7741
// 4.2), which a simulcast receiver's packets are rewritten in as their
// sequence numbers are: each encoding numbers its pictures from a start
// of its own, and libwebrtc's VP8 reference finder, keyed on PictureID
// and TL0PICIDX, drops the delta frames after a switch whose numbers
// jumped (backwards half the time) against what it kept of the old
// encoding (struct vp8_pictures).
type VP8 struct {
	Picture uint16 // 15 bits
	TL0     uint8  // TL0PICIDX
	KeyIdx  uint8  // 5 bits
	Fields  uint8  // which the packet carries (VP8Picture, VP8TL0, VP8KeyIdx)
}

// The fields of VP8. Only a descriptor with a 15-bit PictureID (what
// browsers send) is read: one with a 7-bit id or none is left as it is.
const (
	VP8Picture = 1 << iota
	VP8TL0
	VP8KeyIdx
)

const (
	vp8PictureMask = 0x7fff
	vp8KeyIdxMask  = 0x1f
)

// Shifted is v with shift added to each field v carries.
func (v VP8) Shifted(shift VP8) VP8 {
	out := VP8{Fields: v.Fields}
	if v.Fields&VP8Picture != 0 {
		out.Picture = (v.Picture + shift.Picture) & vp8PictureMask
	}
	if v.Fields&VP8TL0 != 0 {
		out.TL0 = v.TL0 + shift.TL0
	}
	if v.Fields&VP8KeyIdx != 0 {
		out.KeyIdx = (v.KeyIdx + shift.KeyIdx) & vp8KeyIdxMask
	}
	return out
}

// after is last (the numbering sent so far) once sent went out: a field
// sent takes its value, the others keep theirs, so a field stays known
// once sent (an encoding that carries it again, after one that did not,
// goes on from the last value sent; a browser's encodings share one form).
func (last VP8) after(sent VP8) VP8 {
	if sent.Fields&VP8Picture != 0 {
		last.Picture = sent.Picture
	}
	if sent.Fields&VP8TL0 != 0 {
		last.TL0 = sent.TL0
	}
	if sent.Fields&VP8KeyIdx != 0 {
		last.KeyIdx = sent.KeyIdx
	}
	last.Fields |= sent.Fields
	return last
}

// continuing is the shift that makes next, the first packet of a key
// frame of the encoding a receiver moves to, follow last: each field one
// up (a key frame is a new picture, of temporal layer 0, and a new
// temporal key). A field either lacks keeps no shift.
func continuing(last, next VP8) VP8 {
	both := last.Fields & next.Fields
	var s VP8
	if both&VP8Picture != 0 {
		s.Picture = (last.Picture + 1 - next.Picture) & vp8PictureMask
	}
	if both&VP8TL0 != 0 {
		s.TL0 = last.TL0 + 1 - next.TL0
	}
	if both&VP8KeyIdx != 0 {
		s.KeyIdx = (last.KeyIdx + 1 - next.KeyIdx) & vp8KeyIdxMask
	}
	return s
}
