package sfu

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The wire check: what crosses the SFU's interface to and from its media
// port during a meeting, read from the RTP payloads. SRTP leaves the RTP
// header in the clear and encrypts the payload, so a plain payload shows
// its codec's framing in its first byte, which takes few values (Opus's
// TOC byte, a VP8 payload descriptor, an AV1 aggregation header, an RTX
// packet's original sequence number): nearly every packet's first byte is
// among the flow's 8 most common. Encrypted, the byte is uniform: about 8
// in 256 are.

// wireFlow is one direction of one flow's RTP, by payload type.
type wireFlow struct {
	packets    int
	firstBytes map[byte]int
}

// wireCapture counts, per (source, destination, payload type), the RTP
// to or from the media port on the SFU's client-side interface.
type wireCapture map[string]*wireFlow

// captureWire reads the SFU's interface until the meeting ends.
func captureWire(tb *testbed.Testbed, meeting context.Context) (wireCapture, error) {
	out := wireCapture{}
	err := readFrames(tb, meeting, func(frame []byte) {
		src, dport, payload, ok := ipv4UDP(frame)
		if ok && (dport == testbed.SFUMedia.Port() || src.Port() == testbed.SFUMedia.Port()) {
			out.add(fmt.Sprintf("%v->:%d", src, dport), payload)
		}
	})
	return out, err
}

// readFrames hands each frame crossing the SFU's client-side interface
// (either way, from an AF_PACKET socket in the server namespace) to got
// until ctx ends.
func readFrames(tb *testbed.Testbed, ctx context.Context, got func(frame []byte)) error {
	return tb.Server.Do(func() error {
		const all = unix.ETH_P_ALL>>8 | unix.ETH_P_ALL&0xff<<8 // in network order
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, all)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifi, err := net.InterfaceByName(testbed.ServerCliIface)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		buf := make([]byte, 65536)
		for ctx.Err() == nil {
			if n, _, err := unix.Recvfrom(fd, buf, 0); err == nil {
				got(buf[:n])
			}
		}
		return nil
	})
}

func (w wireCapture) add(flow string, p []byte) {
	if len(p) < 12 || p[0]>>6 != 2 || (p[1] >= 192 && p[1] <= 223) {
		return // not RTP (STUN, DTLS, RTCP)
	}
	pt := p[1] & 0x7f
	off := 12 + 4*int(p[0]&0x0f)
	if p[0]&0x10 != 0 && len(p) >= off+4 {
		off += 4 + 4*int(binary.BigEndian.Uint16(p[off+2:]))
	}
	end := len(p)
	if p[0]&0x20 != 0 && end > off { // padding: its length is the last byte (encrypted: the tag's)
		end = max(off, end-int(p[end-1]))
	}
	if end-off < 2 {
		return
	}
	key := fmt.Sprintf("%s pt %d", flow, pt)
	f := w[key]
	if f == nil {
		f = &wireFlow{firstBytes: map[byte]int{}}
		w[key] = f
	}
	f.packets++
	f.firstBytes[p[off]]++
}

// plain says which flows (of at least 50 packets) look plain: over half
// their payloads start with one of the flow's 8 most common bytes.
func (w wireCapture) plain() (flows []string, total int) {
	for key, f := range w {
		total += f.packets
		if f.packets < 50 {
			continue
		}
		counts := make([]int, 0, len(f.firstBytes))
		for _, n := range f.firstBytes {
			counts = append(counts, n)
		}
		slices.Sort(counts)
		top := 0
		for _, n := range counts[max(0, len(counts)-8):] {
			top += n
		}
		if 2*top > f.packets {
			flows = append(flows, fmt.Sprintf("%s: %d of %d packets", key, top, f.packets))
		}
	}
	return flows, total
}
