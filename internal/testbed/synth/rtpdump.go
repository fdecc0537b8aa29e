// Package synth is synthetic WebRTC participants for ebrtc sfu: senders
// that replay a captured Chromium stream as many virtual publishers, and
// receivers that check every packet they get. They join through the SFU's
// own signaling and ICE, as browsers do, so they exercise the whole SFU.
package synth

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// Packet is one captured RTP packet and when it was sent, from the start.
type Packet struct {
	At   time.Duration
	Data []byte
}

const rtpdumpMagic = "#!rtpplay1.0 "

// ReadRTPDump reads the rtpdump format of rtptools (rtpdump -F dump):
// a text line, a 16-byte header, then per packet its length, the RTP
// length and the offset in milliseconds, and the packet.
func ReadRTPDump(r io.Reader) ([]Packet, error) {
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	if err != nil || len(line) < len(rtpdumpMagic) || line[:len(rtpdumpMagic)] != rtpdumpMagic {
		return nil, errors.New("rtpdump: not an rtpdump file (no #!rtpplay1.0 line)")
	}
	if _, err := io.ReadFull(br, make([]byte, 16)); err != nil {
		return nil, fmt.Errorf("rtpdump: header: %w", err)
	}
	var out []Packet
	for {
		var h [8]byte
		if _, err := io.ReadFull(br, h[:]); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("rtpdump: packet %d: %w", len(out), err)
		}
		n := int(binary.BigEndian.Uint16(h[0:]))
		if n < 8 {
			return nil, fmt.Errorf("rtpdump: packet %d: length %d", len(out), n)
		}
		data := make([]byte, n-8)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("rtpdump: packet %d: %w", len(out), err)
		}
		out = append(out, Packet{At: time.Duration(binary.BigEndian.Uint32(h[4:])) * time.Millisecond, Data: data})
	}
}

// WriteRTPDump writes packets in rtpdump format, as sent from source.
func WriteRTPDump(w io.Writer, source netip.AddrPort, start time.Time, pkts []Packet) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s%s/%d\n", rtpdumpMagic, source.Addr(), source.Port())
	var h [16]byte
	binary.BigEndian.PutUint32(h[0:], uint32(start.Unix()))
	binary.BigEndian.PutUint32(h[4:], uint32(start.Nanosecond()/1000))
	if a := source.Addr(); a.Is4() {
		copy(h[8:12], a.AsSlice())
	}
	binary.BigEndian.PutUint16(h[12:], source.Port())
	bw.Write(h[:])
	for _, p := range pkts {
		var ph [8]byte
		binary.BigEndian.PutUint16(ph[0:], uint16(len(p.Data)+8))
		binary.BigEndian.PutUint16(ph[2:], uint16(len(p.Data)))
		binary.BigEndian.PutUint32(ph[4:], uint32(p.At/time.Millisecond))
		bw.Write(ph[:])
		bw.Write(p.Data)
	}
	return bw.Flush()
}
