package afxdp

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/egress"
)

// Header lengths of a sent frame.
const (
	ethLen  = 14
	ipv4Len = 20
	ipv6Len = 40
	udpLen  = 8
)

// header is what a frame's IP header carries besides the addresses, as
// the kernel would write it for the socket and path.
type header struct {
	ttl, tos  uint8  // TTL or hop limit; TOS or traffic class
	id        uint16 // IPv4: the datagram's ID
	flowLabel uint32 // IPv6
}

// frameLen is the frame a datagram of n bytes to dst makes.
func frameLen(dst netip.Addr, n int) int {
	if dst.Is4() {
		return ethLen + ipv4Len + udpLen + n
	}
	return ethLen + ipv6Len + udpLen + n
}

// writeFrame writes the Ethernet frame of a UDP datagram from src to dst
// (both of one family, unmapped) along p into f, checksums computed, and
// returns its length. f holds frameLen.
func writeFrame(f []byte, p *egress.Path, src, dst netip.AddrPort, payload []byte, h header) int {
	copy(f[0:6], p.DstMAC[:])
	copy(f[6:12], p.SrcMAC[:])
	ulen := udpLen + len(payload)
	var udp []byte
	var pseudo uint64
	if dst.Addr().Is4() {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := f[ethLen : ethLen+ipv4Len]
		ip[0], ip[1] = 0x45, h.tos
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4Len+ulen))
		binary.BigEndian.PutUint16(ip[4:], h.id)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF: what does not fit the path went to the kernel
		ip[8], ip[9] = h.ttl, 17
		ip[10], ip[11] = 0, 0
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.NativeEndian.PutUint16(ip[10:], ^fold(sumNative(ip, 0)))
		udp = f[ethLen+ipv4Len : ethLen+ipv4Len+ulen]
		pseudo = sumNative(ip[12:20], 0)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		ip := f[ethLen : ethLen+ipv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(h.tos)<<20|h.flowLabel&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(ulen))
		ip[6], ip[7] = 17, h.ttl
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		udp = f[ethLen+ipv6Len : ethLen+ipv6Len+ulen]
		pseudo = sumNative(ip[8:40], 0)
	}
	var lenProto [4]byte
	binary.BigEndian.PutUint16(lenProto[0:], 17)
	binary.BigEndian.PutUint16(lenProto[2:], uint16(ulen))
	pseudo = sumNative(lenProto[:], pseudo)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(ulen))
	udp[6], udp[7] = 0, 0
	copy(udp[udpLen:], payload)
	sum := ^fold(sumNative(udp, pseudo))
	if sum == 0 {
		sum = 0xffff // 0 says "no checksum" (RFC 768)
	}
	binary.NativeEndian.PutUint16(udp[6:], sum)
	return frameLen(dst.Addr(), len(payload))
}

// sumNative adds b to sum as 16-bit words in memory order (the Internet
// checksum is the same in either byte order, RFC 1071): fold it and
// store it in memory order. It adds 64-bit words with end-around carry,
// four at a time (2^64 = 1 modulo 2^16-1, so the folded sum is the
// 16-bit one), and returns a value congruent to the 16-bit sum, zero
// only for all-zero input: a replica's checksum is a pass over its
// payload, so this is one of the sender's costs per replica.
func sumNative(b []byte, sum uint64) uint64 {
	acc, carries := sum, uint64(0)
	var c uint64
	for ; len(b) >= 32; b = b[32:] {
		acc, c = bits.Add64(acc, binary.NativeEndian.Uint64(b), 0)
		carries += c
		acc, c = bits.Add64(acc, binary.NativeEndian.Uint64(b[8:]), 0)
		carries += c
		acc, c = bits.Add64(acc, binary.NativeEndian.Uint64(b[16:]), 0)
		carries += c
		acc, c = bits.Add64(acc, binary.NativeEndian.Uint64(b[24:]), 0)
		carries += c
	}
	for ; len(b) >= 8; b = b[8:] {
		acc, c = bits.Add64(acc, binary.NativeEndian.Uint64(b), 0)
		carries += c
	}
	// Down to 33 bits, then the rest as 16-bit words (no overflow left).
	total := acc&0xffffffff + acc>>32 + carries
	for ; len(b) >= 2; b = b[2:] {
		total += uint64(binary.NativeEndian.Uint16(b))
	}
	if len(b) == 1 {
		var last [2]byte
		last[0] = b[0]
		total += uint64(binary.NativeEndian.Uint16(last[:]))
	}
	return total
}

// fold folds a sum to 16 bits.
func fold(sum uint64) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}
