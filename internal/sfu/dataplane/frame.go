package dataplane

import (
	"encoding/binary"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Rate adaptation's view of a packet, as bpf/dd.h and video_frame in
// bpf/sfu.c take it; TestLayersAgreeWithBPF holds the two together.

// RTP header extension profiles (RFC 8285) and the element walk's bound.
const (
	extOneByte  = 0xBEDE
	extTwoByte  = 0x1000 // upper 12 bits
	extMaxSteps = 32     // RTP_EXT_MAX_STEPS
)

// rtpExtension is the data of header extension element id of the RTP
// packet p whose header is hdr bytes, or nil.
func rtpExtension(p []byte, hdr int, id uint8) []byte {
	off, n := rtpExtensionAt(p, hdr, id)
	if n == 0 {
		return nil
	}
	return p[off : off+n]
}

// rtpExtensionAt is where element id's data is in p, and its length (0:
// not found, or the extension is malformed).
func rtpExtensionAt(p []byte, hdr int, id uint8) (off, n int) {
	if p[0]&0x10 == 0 || id == 0 {
		return 0, 0
	}
	pos := rtpHeaderLen + 4*int(p[0]&0x0f)
	profile := binary.BigEndian.Uint16(p[pos:])
	two := profile&0xfff0 == extTwoByte
	if profile != extOneByte && !two {
		return 0, 0
	}
	pos += 4
	for range extMaxSteps {
		if pos >= hdr {
			return 0, 0
		}
		b := p[pos]
		if b == 0 { // padding
			pos++
			continue
		}
		var data, n int
		eid := b
		if two {
			if pos+2 > hdr {
				return 0, 0
			}
			data, n = pos+2, int(p[pos+1])
		} else {
			if b>>4 == 15 {
				return 0, 0
			}
			data, n, eid = pos+1, int(b&0x0f)+1, b>>4
		}
		if data+n > hdr {
			return 0, 0
		}
		if eid == id {
			return data, n
		}
		pos = data + n
	}
	return 0, 0
}

// templateKnown and the layout of a template's entry (TEMPLATE_*).
const templateKnown = 1 << 31

// templatesOf lays out the structure's templates as the data plane looks
// them up: id (offset + i) mod 64 -> known, DTIs, the lowest target it
// serves. A structure of more than layers.MaxTargets targets is not
// adapted (no targets: every frame goes to everyone).
func templatesOf(s *dd.Structure) sfuLayerTemplates {
	var t sfuLayerTemplates
	if s.DecodeTargets == 0 || s.DecodeTargets > layers.MaxTargets {
		return t
	}
	for i, tp := range s.Templates {
		lowest := 0
		for lowest < len(tp.DTIs)-1 && tp.DTIs[lowest] == dd.NotPresent {
			lowest++
		}
		t.T[(s.IDOffset+i)%dd.MaxTemplates] = templateKnown | uint32(layers.PackDTIs(tp.DTIs)) | uint32(lowest)<<16
	}
	t.Targets = uint32(s.DecodeTargets)
	return t
}

// frameOf is the frame of RTP packet p (header hdr bytes) from a sender
// whose descriptor is extension ddExt, with templates tbl; layer is the
// target its bytes count to (-1: none), structure the descriptor when
// the packet attaches a structure.
func frameOf(p []byte, hdr int, ddExt uint8, tbl *sfuLayerTemplates) (f layers.Frame, layer int, structure []byte) {
	f.Packet.Seq = binary.BigEndian.Uint16(p[2:])
	layer = -1
	if p[0]&0x20 != 0 && int(p[len(p)-1]) == len(p)-hdr {
		f.Packet.Padding = true
		return f, layer, nil
	}
	d := rtpExtension(p, hdr, ddExt)
	if len(d) < 3 {
		return f, layer, nil
	}
	f.Packet.Frame = binary.BigEndian.Uint16(d[1:])
	f.Packet.Start, f.Packet.End = d[0]&0x80 != 0, d[0]&0x40 != 0
	attaches := len(d) > 3 && d[3]&0x80 != 0
	custom := len(d) > 3 && d[3]&0x20 != 0
	if attaches {
		// Judged by its own structure's target count (DTIS_ALL_SWITCH in
		// bpf/sfu.c): the table in force may have more targets.
		structure = d
		targets := structureTargets(d)
		if targets == 0 || targets > layers.MaxTargets {
			return f, layer, structure
		}
		f.DTIs, f.Known, f.Targets = layers.AllSwitch, true, targets
		return f, 0, structure
	}
	if tbl == nil || tbl.Targets == 0 || tbl.Targets > layers.MaxTargets {
		return f, layer, structure
	}
	t := tbl.T[d[0]&0x3f]
	if t&templateKnown == 0 || custom {
		return f, layer, structure
	}
	f.DTIs, f.Known, f.Targets = layers.DTIs(t&0xffff), true, uint8(tbl.Targets)
	return f, int(t >> 16 & (layers.MaxTargets - 1)), structure
}

// structureTargets is the decode target count of the structure descriptor
// d attaches: byte 3's five flags, then the template id offset (6 bits)
// and the count less one (5 bits). 0: cut short.
func structureTargets(d []byte) uint8 {
	if len(d) < 5 {
		return 0
	}
	return d[4]&0x1f + 1
}

// PaddingPacket is what a receiver gets in place of a late packet of a
// layer it does not get (or a retransmission of one): the packet's fixed header (payload type,
// timestamp, SSRC) under the receiver's number, no marker, no extension,
// and padding only, which libwebrtc counts as received and does not decode.
func PaddingPacket(rtp []byte, number uint16) []byte {
	const padding = 4
	b := make([]byte, rtpHeaderLen+padding)
	copy(b, rtp[:rtpHeaderLen])
	b[0] = 0x80 | 0x20 // version 2, padding, no extension, no CSRCs
	b[1] &= 0x7f       // no marker
	binary.BigEndian.PutUint16(b[2:], number)
	b[len(b)-1] = padding
	return b
}

// ExtensionOffset is where header extension element id's data is in RTP
// packet p, and its length; 0, 0 when p has none (or is not RTP).
func ExtensionOffset(p []byte, id uint8) (off, n int) {
	hdr := rtpHeader(p)
	if hdr < 0 {
		return 0, 0
	}
	return rtpExtensionAt(p, hdr, id)
}
