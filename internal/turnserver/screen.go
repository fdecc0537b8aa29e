package turnserver

import (
	"encoding/binary"
	"net"
	"strconv"

	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/turnserver/restart"
)

// What arrives on a UDP listener, judged before pion parses it.
type datagramKind int

const (
	kindSTUN datagramKind = iota
	kindChannelData
	kindMalformed     // neither STUN nor ChannelData
	kindChannelLength // ChannelData whose length does not fit the datagram
)

const stunHeaderLen = 20

var kindReasons = map[datagramKind]string{kindMalformed: "malformed", kindChannelLength: "channel_length"}

// classifyDatagram applies the fast path's rules (bpf/turn_offload.c) to a
// datagram at a UDP listener: ChannelData is numbered 0x4000-0x7FFF and its
// data fits the datagram with at most 3 bytes of padding after it (RFC 8656
// section 12.5), so both paths relay the same datagrams; a STUN message
// starts with two zero bits, the magic cookie, and a length that matches.
func classifyDatagram(b []byte) datagramKind {
	if len(b) < 4 {
		return kindMalformed
	}
	switch b[0] >> 6 {
	case 0b01:
		dataLen := int(binary.BigEndian.Uint16(b[2:]))
		if extra := len(b) - 4 - dataLen; extra < 0 || extra > 3 {
			return kindChannelLength
		}
		return kindChannelData
	case 0b00:
		if !stun.IsMessage(b) || int(binary.BigEndian.Uint16(b[2:]))+stunHeaderLen != len(b) {
			return kindMalformed
		}
		return kindSTUN
	}
	return kindMalformed
}

// screenedConn is a UDP listener socket as pion sees it: datagrams that are
// neither STUN nor well-formed ChannelData are dropped and counted before
// pion spends time on them, and the error responses pion sends are counted.
type screenedConn struct {
	net.PacketConn
	events *metrics.Events
	reader restart.Reader
}

func (c *screenedConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.reader.Read(c.PacketConn, p)
		if err != nil {
			return n, addr, err
		}
		if k := classifyDatagram(p[:n]); k != kindSTUN && k != kindChannelData {
			c.events.Dropped.WithLabelValues(kindReasons[k]).Inc()
			continue
		}
		return n, addr, nil
	}
}

func (c *screenedConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	countErrorResponse(c.events, p)
	return c.PacketConn.WriteTo(p, addr)
}

// screenedListener counts the error responses sent on stream connections
// (pion frames those itself; a malformed stream closes the connection).
type screenedListener struct {
	net.Listener
	events *metrics.Events
	gate   *restart.Gate // holds Accept for a hand-over (nil: none)
}

func (l *screenedListener) Accept() (net.Conn, error) {
	c, err := l.gate.Accept(l.Listener)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, events: l.events}, nil
}

type countingConn struct {
	net.Conn
	events *metrics.Events
}

func (c *countingConn) Write(p []byte) (int, error) {
	countErrorResponse(c.events, p)
	return c.Conn.Write(p)
}

// countErrorResponse counts an outgoing STUN error response by method and
// code; a stale nonce also counts as an authentication failure. Data
// (ChannelData, indications, successes) costs a two-byte look.
func countErrorResponse(e *metrics.Events, p []byte) {
	const errorClassBits = 0x0110
	if len(p) < stunHeaderLen || p[0]>>6 != 0 || binary.BigEndian.Uint16(p)&errorClassBits != errorClassBits {
		return
	}
	m := &stun.Message{Raw: append([]byte(nil), p...)}
	if m.Decode() != nil {
		return
	}
	var code stun.ErrorCodeAttribute
	if code.GetFrom(m) != nil {
		return
	}
	e.ErrorResponses.WithLabelValues(m.Type.Method.String(), strconv.Itoa(int(code.Code))).Inc()
	if code.Code == stun.CodeStaleNonce {
		e.AuthFailures.WithLabelValues("stale_nonce").Inc()
	}
}
