package offload

import (
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/netorder"
)

const (
	afInet  = 2
	afInet6 = 10
)

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
	e.Port = netorder.Port(ap.Port())
	e.Family = family(a)
	return e
}
