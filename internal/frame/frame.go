// Package frame builds and parses Ethernet/IPv4/IPv6/UDP frames and TURN
// ChannelData in plain Go. Tests use it as the independent reference that BPF
// rewrites are checked against, so it computes every checksum from scratch.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoUDP      = 17
	ethLen        = 14
)

// UDP describes one Ethernet frame carrying a UDP datagram.
type UDP struct {
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.AddrPort
	TOS            uint8 // IPv4 TOS or IPv6 traffic class
	TTL            uint8 // TTL or hop limit
	DF             bool  // IPv4 only
	ID             uint16
	FlowLabel      uint32 // IPv6 only
	Payload        []byte
	// NoChecksum sends a zero UDP checksum (valid for IPv4 only).
	NoChecksum bool
	// PartialChecksum leaves in the checksum field only the pseudo-header
	// sum, as a sender with checksum offload hands the datagram to its
	// device (CHECKSUM_PARTIAL).
	PartialChecksum bool
}

// Marshal returns the frame bytes.
func (u UDP) Marshal() []byte {
	udp := make([]byte, 8+len(u.Payload))
	binary.BigEndian.PutUint16(udp[0:], u.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], u.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], u.Payload)
	switch {
	case u.PartialChecksum:
		binary.BigEndian.PutUint16(udp[6:], fold(sum(pseudoHeader(u.Src.Addr(), u.Dst.Addr(), len(udp)), 0)))
	case !u.NoChecksum:
		binary.BigEndian.PutUint16(udp[6:], UDPChecksum(u.Src.Addr(), u.Dst.Addr(), udp))
	}
	var ip []byte
	etherType := uint16(etherTypeIPv4)
	if u.Src.Addr().Is4() {
		ip = ipv4Header(u, len(udp))
	} else {
		etherType = etherTypeIPv6
		ip = ipv6Header(u, len(udp))
	}
	out := make([]byte, 0, ethLen+len(ip)+len(udp))
	out = append(out, mac(u.DstMAC)...)
	out = append(out, mac(u.SrcMAC)...)
	out = binary.BigEndian.AppendUint16(out, etherType)
	out = append(out, ip...)
	return append(out, udp...)
}

func mac(m net.HardwareAddr) []byte {
	if len(m) == 6 {
		return m
	}
	return make([]byte, 6)
}

func ipv4Header(u UDP, udpLen int) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	h[1] = u.TOS
	binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
	binary.BigEndian.PutUint16(h[4:], u.ID)
	if u.DF {
		h[6] = 0x40
	}
	h[8] = u.TTL
	h[9] = protoUDP
	src, dst := u.Src.Addr().As4(), u.Dst.Addr().As4()
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	binary.BigEndian.PutUint16(h[10:], Checksum(h))
	return h
}

func ipv6Header(u UDP, udpLen int) []byte {
	h := make([]byte, 40)
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(u.TOS)<<20|u.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
	h[6] = protoUDP
	h[7] = u.TTL
	src, dst := u.Src.Addr().As16(), u.Dst.Addr().As16()
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	return h
}

// Checksum is the RFC 1071 Internet checksum of b.
func Checksum(b []byte) uint16 {
	return ^fold(sum(b, 0))
}

func sum(b []byte, acc uint32) uint32 {
	for len(b) >= 2 {
		acc += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// UDPChecksum computes the UDP checksum (with pseudo-header) of the UDP
// datagram udp, whose checksum field must be zero. A result of 0 is sent as 0xffff.
func UDPChecksum(src, dst netip.Addr, udp []byte) uint16 {
	c := ^fold(sum(udp, sum(pseudoHeader(src, dst, len(udp)), 0)))
	if c == 0 {
		return 0xffff
	}
	return c
}

// pseudoHeader is the UDP pseudo-header (RFC 768, RFC 8200 section 8.1).
func pseudoHeader(src, dst netip.Addr, udpLen int) []byte {
	var pseudo []byte
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		pseudo = append(append(pseudo, s[:]...), d[:]...)
		pseudo = append(pseudo, 0, protoUDP)
		return binary.BigEndian.AppendUint16(pseudo, uint16(udpLen))
	}
	s, d := src.As16(), dst.As16()
	pseudo = append(append(pseudo, s[:]...), d[:]...)
	pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(udpLen))
	return append(pseudo, 0, 0, 0, protoUDP)
}

// ChannelData encodes a TURN ChannelData message (RFC 8656 section 12.4),
// followed by pad bytes of padding (0-3) with the value padByte.
func ChannelData(number uint16, data []byte, pad int, padByte byte) []byte {
	out := binary.BigEndian.AppendUint16(nil, number)
	out = binary.BigEndian.AppendUint16(out, uint16(len(data)))
	out = append(out, data...)
	for range pad {
		out = append(out, padByte)
	}
	return out
}

// PadTo4 is the number of padding bytes that round n up to a multiple of 4.
func PadTo4(n int) int { return (4 - n%4) % 4 }

// Parse decodes a frame built like Marshal builds them and checks its IP and
// UDP checksums and lengths. It is how tests read what the data plane emitted.
func Parse(b []byte) (UDP, error) {
	var u UDP
	if len(b) < ethLen {
		return u, errors.New("frame: short Ethernet header")
	}
	u.DstMAC, u.SrcMAC = net.HardwareAddr(b[0:6]), net.HardwareAddr(b[6:12])
	var udp []byte
	switch binary.BigEndian.Uint16(b[12:]) {
	case etherTypeIPv4:
		ip := b[ethLen:]
		if len(ip) < 20 || ip[0] != 0x45 || ip[9] != protoUDP {
			return u, errors.New("frame: not a plain IPv4/UDP packet")
		}
		if Checksum(ip[:20]) != 0 {
			return u, errors.New("frame: bad IPv4 header checksum")
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total != len(ip) {
			return u, fmt.Errorf("frame: IPv4 total length %d, frame carries %d", total, len(ip))
		}
		u.TOS, u.ID, u.DF, u.TTL = ip[1], binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0, ip[8]
		src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		udp = ip[20:]
		u.Src, u.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
	case etherTypeIPv6:
		ip := b[ethLen:]
		if len(ip) < 40 || ip[0]>>4 != 6 || ip[6] != protoUDP {
			return u, errors.New("frame: not a plain IPv6/UDP packet")
		}
		if n := int(binary.BigEndian.Uint16(ip[4:])); n != len(ip)-40 {
			return u, fmt.Errorf("frame: IPv6 payload length %d, frame carries %d", n, len(ip)-40)
		}
		w := binary.BigEndian.Uint32(ip)
		u.TOS, u.FlowLabel, u.TTL = uint8(w>>20), w&0xfffff, ip[7]
		src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		udp = ip[40:]
		u.Src, u.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
	default:
		return u, errors.New("frame: not IPv4 or IPv6")
	}
	if len(udp) < 8 || int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return u, errors.New("frame: UDP length does not match the IP length")
	}
	u.Src = netip.AddrPortFrom(u.Src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	u.Dst = netip.AddrPortFrom(u.Dst.Addr(), binary.BigEndian.Uint16(udp[2:]))
	u.Payload = udp[8:]
	got := binary.BigEndian.Uint16(udp[6:])
	if got == 0 {
		if u.Src.Addr().Is6() {
			return u, errors.New("frame: zero UDP checksum on IPv6")
		}
		u.NoChecksum = true
		return u, nil
	}
	cp := append([]byte(nil), udp...)
	cp[6], cp[7] = 0, 0
	if want := UDPChecksum(u.Src.Addr(), u.Dst.Addr(), cp); got != want {
		return u, fmt.Errorf("frame: UDP checksum %#04x, want %#04x", got, want)
	}
	return u, nil
}
