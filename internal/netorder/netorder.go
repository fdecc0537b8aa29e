// Package netorder writes values as BPF programs and maps hold them: in
// network byte order in memory, which the Go structs bpf2go generates read
// as native integers.
package netorder

import (
	"encoding/binary"
	"net/netip"
)

// Port is the value whose in-memory bytes are p in network order; applied
// twice it gives p back (a swap on little-endian hosts, none on big-endian).
func Port(p uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, p))
}

// Word is the same for a 32-bit value (an SSRC, say).
func Word(v uint32) uint32 {
	return binary.NativeEndian.Uint32(binary.BigEndian.AppendUint32(nil, v))
}

// IPv4 is an IPv4 address (or an IPv4-mapped IPv6 one) as a 32-bit word
// whose in-memory bytes are the address.
func IPv4(a netip.Addr) uint32 {
	b := a.Unmap().As4()
	return binary.NativeEndian.Uint32(b[:])
}
