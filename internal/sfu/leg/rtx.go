package leg

import (
	"encoding/binary"
	"errors"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
)

// RTX is a leg's retransmission stream (RFC 4588), as its receiver
// negotiated it: the payload type that carries it and its SSRC.
type RTX struct {
	PT   uint8
	SSRC uint32
}

// retransmission is what a receiver is sent for a packet it NACKed: on
// RTX, the original packet's header (its timestamp, marker, CSRCs and
// header extensions) under the RTX payload type, SSRC and sequence number
// seq, its payload the original sequence number the receiver knows
// (number) and then the original payload, without padding; without RTX,
// the original packet under number.
func retransmission(orig []byte, number uint16, rtx *RTX, seq uint16) ([]byte, error) {
	if rtx == nil {
		if len(orig) < 12 {
			return nil, errors.New("leg: not RTP")
		}
		b := append([]byte(nil), orig...)
		binary.BigEndian.PutUint16(b[2:], number)
		return b, nil
	}
	var p rtp.Packet
	if err := p.Unmarshal(orig); err != nil {
		return nil, err
	}
	payload := make([]byte, 2+len(p.Payload))
	binary.BigEndian.PutUint16(payload, number)
	copy(payload[2:], p.Payload)
	p.Header.Padding, p.Header.PaddingSize, p.PaddingSize = false, 0, 0 //nolint:staticcheck // both, as Unmarshal sets both
	p.PayloadType, p.SSRC, p.SequenceNumber, p.Payload = rtx.PT, rtx.SSRC, seq, payload
	return p.Marshal()
}

// paddingSize is a probe packet's padding: the most one RTP packet holds.
const paddingSize = 255

// padding is a padding-only RTX packet (RFC 4588 section 4: no original
// sequence number, no payload), as libwebrtc probes with: its
// transport-wide sequence number at the offset returned (0: no extension
// id given).
func padding(rtx *RTX, seq uint16, ts uint32, twccExt uint8) ([]byte, int, error) {
	if rtx == nil {
		return nil, 0, errors.New("leg: padding needs RTX")
	}
	h := rtp.Header{Version: 2, Padding: true, PaddingSize: paddingSize, PayloadType: rtx.PT, SequenceNumber: seq, Timestamp: ts, SSRC: rtx.SSRC}
	if twccExt != 0 {
		h.Extension, h.ExtensionProfile = true, 0xBEDE
		if err := h.SetExtension(twccExt, []byte{0, 0}); err != nil {
			return nil, 0, err
		}
	}
	p, err := (&rtp.Packet{Header: h}).Marshal()
	if err != nil {
		return nil, 0, err
	}
	off := 0
	if twccExt != 0 {
		off = 12 + 4 + 1 // fixed header, extension header, the element's id and length
	}
	return p, off, nil
}

var errNotRTP = errors.New("leg: not RTP")

// sendRTX sends orig again as the receiver's number n: on RTX where it
// negotiated it (its next RTX number), else under n; the leg's
// transport-wide number stamped in.
func (l *Leg) sendRTX(orig []byte, n uint16) error {
	l.mu.Lock()
	rtxSeq := l.rtxSeq
	l.rtxSeq++
	if len(orig) >= 8 {
		l.lastTS = binary.BigEndian.Uint32(orig[4:])
	}
	l.mu.Unlock()
	p, err := retransmission(orig, n, l.cfg.RTX, rtxSeq)
	if err != nil {
		return errNotRTP
	}
	off, extLen := dataplane.ExtensionOffset(p, l.cfg.TWCCExt)
	if extLen != 2 {
		off = 0
	}
	return l.dp.Send(p, off)
}
