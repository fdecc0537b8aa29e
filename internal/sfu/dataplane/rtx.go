package dataplane

import "encoding/binary"

// A sender's retransmission streams (RFC 4588). The SFU asks publishers
// for RTX because libwebrtc probes its uplink with it: without RTX it pads
// a probe only on a media SSRC, between frames and after its first media
// packet, so its first probes, sent as the transport comes up, often fail,
// and an application-limited encoder then never raises its estimate from
// the start value (a simulcast publisher stayed at 300 kbit/s for a whole
// meeting). With RTX it probes with padding (SSRC 0 before any media, its
// RTX SSRC after) and with old packets sent again.
//
// The data planes describe no RTX SSRC to the eBPF program: RTX packets
// reach user space (the user plane, or the eBPF plane's slow path), which
// counts their transport-wide numbers as arrivals, and turns one that
// carries a packet back into that packet, which then goes the way of any
// other: to its receivers if it is missing (a repair the SFU asked for),
// to nobody if the source's history has it (a probe's old packet).

// RTX is one source's retransmission stream.
type RTX struct {
	PT      uint8  // its payload type
	MediaPT uint8  // the payload type it repairs (its apt)
	SSRC    uint32 // its SSRC; 0: a simulcast encoding's, named by RRIDExt
	RRIDExt uint8  // header extension id of the repaired stream id (RFC 8852)
}

// repairedPacket is the packet p (an RTP packet from the sender of
// sources, on an SSRC none of them is) carries as a retransmission, in buf,
// and its classification, with Replicated; or, carrying none, what p
// counts as: a probe (padding on SSRC 0 or on one of their RTX SSRCs), or
// an unknown sender's.
func repairedPacket(sources []Source, p []byte, cl Classified, buf []byte) ([]byte, Classified, Outcome) {
	if cl.Payload == nil {
		return nil, Classified{}, UnknownSender
	}
	hdr := len(p) - len(cl.Payload)
	src, ok := repairedSource(sources, p, hdr, cl.SSRC)
	if !ok {
		if cl.SSRC == 0 && p[0]&0x20 != 0 {
			return nil, Classified{}, Probe
		}
		return nil, Classified{}, UnknownSender
	}
	payload := cl.Payload
	if p[0]&0x20 != 0 { // (its last byte counts the padding, itself included)
		n := int(payload[len(payload)-1])
		if n == 0 || n > len(payload) {
			return nil, Classified{}, Probe
		}
		payload = payload[:len(payload)-n]
	}
	if len(payload) < 2 { // padding: a probe's
		return nil, Classified{}, Probe
	}
	buf = append(buf[:0], p[:hdr]...)
	buf[0] &^= 0x20
	buf[1] = p[1]&0x80 | src.RTX.MediaPT&0x7f
	copy(buf[2:4], payload[:2]) // the original sequence number
	binary.BigEndian.PutUint32(buf[8:], src.SSRC)
	buf = append(buf, payload[2:]...)
	return buf, Classify(buf), Replicated
}

// repairedSource is the source whose RTX stream an RTP packet (its header
// hdr bytes long, its SSRC ssrc) is on.
func repairedSource(sources []Source, p []byte, hdr int, ssrc uint32) (Source, bool) {
	pt := p[1] & 0x7f
	for _, s := range sources {
		if s.RTX == nil || s.RTX.PT != pt {
			continue
		}
		if s.Simulcast == nil {
			if s.RTX.SSRC == ssrc && s.SSRC != 0 {
				return s, true
			}
			continue
		}
		// A simulcast encoding's: the one its repaired stream id names, once
		// learnt (libwebrtc sends the id on every RTX packet until the
		// receiver reports on the RTX SSRC, which the SFU does not).
		if enc, ok := s.Simulcast.encodingNamed(p, hdr, s.RTX.RRIDExt); ok && s.SSRC != 0 && s.Encoding == enc {
			return s, true
		}
	}
	return Source{}, false
}
