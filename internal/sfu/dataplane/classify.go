package dataplane

import "encoding/binary"

// Classified is what Classify says of a datagram.
type Classified struct {
	// Replicate: RTP or an RTCP sender report from SSRC, to be looked up
	// and replicated; otherwise Outcome says why it goes to the agent or
	// the stack.
	Replicate bool
	Outcome   Outcome
	SSRC      uint32
	// Payload is RTP's payload (padding included); nil for RTCP.
	Payload []byte
}

// Classify judges a datagram's UDP payload on a media port by the rules
// the eBPF data plane applies (bpf/rtp.h, bpf/sfu.c): RFC 7983 demux, RTCP
// by RFC 5761, the RTP header's bounds. The user-space data plane uses it;
// TestClassifyAgreesWithBPF holds the two to the same answers.
func Classify(p []byte) Classified {
	o, ssrc, hdr := classify(p)
	c := Classified{Replicate: hdr >= 0, Outcome: o, SSRC: ssrc}
	if hdr > 0 {
		c.Payload = p[hdr:]
	}
	return c
}

// classify returns hdr >= 0 for what is replicated: the RTP header's
// length, or 0 for an RTCP sender report.
func classify(p []byte) (o Outcome, ssrc uint32, hdr int) {
	if len(p) < 2 {
		return Other, 0, -1
	}
	switch {
	case p[0] <= 3:
		return Stun, 0, -1
	case p[0] < 128 || p[0] > 191:
		return Other, 0, -1
	case p[1] >= 192 && p[1] <= 223:
		if len(p) < 8 || p[0]>>6 != 2 {
			return Malformed, 0, -1
		}
		if p[1] != rtcpSR {
			return RTCPToAgent, 0, -1
		}
		return 0, binary.BigEndian.Uint32(p[4:]), 0
	}
	hdr = rtpHeader(p)
	if hdr < 0 {
		return Malformed, 0, -1
	}
	return 0, binary.BigEndian.Uint32(p[8:]), hdr
}

const (
	rtpHeaderLen = 12
	rtcpSR       = 200
)

// rtpHeader is the RTP header's length, or -1 unless it is version 2 and
// the CSRC list, the extension and the padding are all inside the
// datagram (RFC 3550 5.1, 5.3.1).
func rtpHeader(p []byte) int {
	if len(p) < rtpHeaderLen || p[0]>>6 != 2 {
		return -1
	}
	hdr := rtpHeaderLen + 4*int(p[0]&0x0f)
	if len(p) < hdr {
		return -1
	}
	if p[0]&0x10 != 0 {
		if len(p) < hdr+4 {
			return -1
		}
		hdr += 4 + 4*int(binary.BigEndian.Uint16(p[hdr+2:]))
		if len(p) < hdr {
			return -1
		}
	}
	if p[0]&0x20 != 0 {
		pad := int(p[len(p)-1])
		if pad == 0 || pad > len(p)-hdr {
			return -1
		}
	}
	return hdr
}
