package offload

import (
	"encoding/binary"
	"net/netip"
)

const (
	afInet  = 2
	afInet6 = 10
)

// be16 returns the value whose in-memory bytes are port in network order,
// which is how the BPF structs hold ports.
func be16(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return binary.NativeEndian.Uint16(b[:])
}

func ipv4Word(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return afInet
	}
	return afInet6
}

func endpointOf(ap netip.AddrPort) turnEndpoint {
	var e turnEndpoint
	a := ap.Addr()
	if a.Is4() {
		b := a.As4()
		copy(e.Ip.Bytes[:4], b[:])
	} else {
		e.Ip.Bytes = a.As16()
	}
	e.Port = be16(ap.Port())
	e.Family = family(a)
	return e
}
