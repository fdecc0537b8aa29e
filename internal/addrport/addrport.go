// Package addrport is what every relay does to a UDP address before it
// uses it as a key: one form per peer.
package addrport

import "net/netip"

// Unmap is ap with an IPv4-mapped IPv6 address (what a dual-stack socket
// reports for an IPv4 peer) as the plain IPv4 address, so that a peer has
// one key whichever socket saw it.
func Unmap(ap netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) }
