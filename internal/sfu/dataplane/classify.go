package dataplane

import "encoding/binary"

// Classify judges a datagram's UDP payload on a media port by the rules
// the eBPF data plane applies (bpf/rtp.h, bpf/sfu.c): RFC 7983 demux, RTCP
// by RFC 5761, the RTP header's bounds. replicate says the payload is RTP
// or an RTCP sender report from ssrc, to be looked up and replicated;
// otherwise the outcome says why it goes to the agent or the stack. The
// user-space data plane uses it; TestClassifyAgreesWithBPF holds the two
// to the same answers.
func Classify(p []byte) (o Outcome, ssrc uint32, replicate bool) {
	if len(p) < 2 {
		return Other, 0, false
	}
	switch {
	case p[0] <= 3:
		return Stun, 0, false
	case p[0] < 128 || p[0] > 191:
		return Other, 0, false
	case p[1] >= 192 && p[1] <= 223:
		if len(p) < 8 || p[0]>>6 != 2 {
			return Malformed, 0, false
		}
		if p[1] != rtcpSR {
			return RTCPToAgent, 0, false
		}
		return 0, binary.BigEndian.Uint32(p[4:]), true
	}
	if !rtpWellFormed(p) {
		return Malformed, 0, false
	}
	return 0, binary.BigEndian.Uint32(p[8:]), true
}

const (
	rtpHeaderLen = 12
	rtcpSR       = 200
)

// rtpWellFormed: version 2, and the CSRC list, the extension and the
// padding all inside the datagram (RFC 3550 5.1, 5.3.1).
func rtpWellFormed(p []byte) bool {
	if len(p) < rtpHeaderLen || p[0]>>6 != 2 {
		return false
	}
	hdr := rtpHeaderLen + 4*int(p[0]&0x0f)
	if len(p) < hdr {
		return false
	}
	if p[0]&0x10 != 0 {
		if len(p) < hdr+4 {
			return false
		}
		hdr += 4 + 4*int(binary.BigEndian.Uint16(p[hdr+2:]))
		if len(p) < hdr {
			return false
		}
	}
	if p[0]&0x20 != 0 {
		pad := int(p[len(p)-1])
		if pad == 0 || pad > len(p)-hdr {
			return false
		}
	}
	return true
}
