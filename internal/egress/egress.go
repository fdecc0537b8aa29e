// Package egress asks the kernel where it would send a datagram (the
// route it takes, the next hop's link-layer address) and what a sender
// that hands frames to an interface itself, as an AF_XDP socket does,
// would pass by on the way: a qdisc that shapes, TC egress programs,
// netfilter's output and postrouting hooks. Such a sender may go around
// the kernel only where the kernel would send the same frame unchanged.
package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/rtnl"
)

// Path is where the kernel sends a datagram to an address: out of
// Ifindex, from Src (the route's preferred source where the sender did
// not bind one), to the next hop's link-layer address.
type Path struct {
	Ifindex        int
	Src            netip.Addr
	SrcMAC, DstMAC [6]byte
	MTU            int // the route's, else the interface's
	// HopLimit: IPv6, the interface's (the kernel's where the socket sets
	// none); DefaultHopLimit the namespace's, which such a socket reads.
	HopLimit, DefaultHopLimit int
	// Confirmed: the kernel's neighbour entry is reachable (or
	// permanent). Otherwise it is stale, and the kernel confirms it as it
	// sends (a sender around it should let the kernel send now and then).
	Confirmed bool
}

// Refusal says why a datagram has to go through the kernel: its route is
// not a plain unicast one out of an Ethernet interface, or the next hop
// has no link-layer address yet.
type Refusal struct {
	Reason    string
	Neighbour bool // the next hop is not resolved (the kernel resolves it as it sends)
}

func (r *Refusal) Error() string { return "egress: " + r.Reason }

// Route types (linux/rtnetlink.h).
const rtnUnicast = 1

// Neighbour states (linux/neighbour.h).
const (
	nudReachable = 0x02
	nudStale     = 0x04
	nudDelay     = 0x08
	nudProbe     = 0x10
	nudPermanent = 0x80
)

// Query is a datagram's flow as the socket's own route lookup sees it.
type Query struct {
	Dst, Src         netip.Addr // Src: the bound address (unspecified: the route's choice)
	SrcPort, DstPort uint16
	TOS              uint8  // IPv4
	UID              uint32 // the socket's owner (uid routing rules)
}

// Lookup asks the kernel for the path of q's datagram: the route, as
// "ip route get" with the flow's source, ports, protocol, TOS and uid
// (policy rules and all), then the next hop's neighbour entry. What a
// frame built by hand would get wrong is a Refusal: a route of another
// type (local, blackhole, unreachable, prohibit), a multipath or
// other-family next hop, an encapsulating route (lwtunnel), a locked MTU
// (the kernel then sends without DF), a route or interface hop limit
// other than the default, a link-local or scoped destination, a
// neighbour without a link-layer address. Other errors are the kernel's
// (ENETUNREACH, say).
func Lookup(q Query) (Path, error) {
	dst, src := q.Dst.Unmap(), q.Src.Unmap()
	if dst.Zone() != "" || dst.IsLinkLocalUnicast() {
		return Path{}, &Refusal{fmt.Sprintf("%s is link-local: its interface is the socket's choice", q.Dst), false}
	}
	family, bits := unix.AF_INET, 32
	if dst.Is6() {
		family, bits = unix.AF_INET6, 128
	}
	rt := unix.RtMsg{Family: uint8(family), Dst_len: uint8(bits)}
	if dst.Is4() {
		rt.Tos = q.TOS
	}
	body := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&rt)), unix.SizeofRtMsg)...)
	body = rtnl.AppendAttr(body, unix.RTA_DST, dst.AsSlice())
	if src.IsValid() && !src.IsUnspecified() && src.Is6() == dst.Is6() {
		body[2] = uint8(bits) // rtm_src_len
		body = rtnl.AppendAttr(body, unix.RTA_SRC, src.AsSlice())
	}
	body = rtnl.AppendAttr(body, unix.RTA_UID, binary.NativeEndian.AppendUint32(nil, q.UID))
	body = rtnl.AppendAttr(body, unix.RTA_IP_PROTO, []byte{unix.IPPROTO_UDP})
	body = rtnl.AppendAttr(body, unix.RTA_SPORT, binary.BigEndian.AppendUint16(nil, q.SrcPort))
	body = rtnl.AppendAttr(body, unix.RTA_DPORT, binary.BigEndian.AppendUint16(nil, q.DstPort))
	msgs, err := rtnl.Request(unix.NETLINK_ROUTE, unix.RTM_GETROUTE, 0, body)
	if err != nil {
		return Path{}, fmt.Errorf("egress: route to %s: %w", dst, err)
	}
	if len(msgs) != 1 || msgs[0].Header.Type != unix.RTM_NEWROUTE || len(msgs[0].Data) < unix.SizeofRtMsg {
		return Path{}, fmt.Errorf("egress: route to %s: unexpected answer", dst)
	}
	got := (*unix.RtMsg)(unsafe.Pointer(&msgs[0].Data[0]))
	if got.Type != rtnUnicast {
		return Path{}, &Refusal{fmt.Sprintf("route to %s of type %d, not unicast", dst, got.Type), false}
	}
	attrs, err := rtnl.Attrs(msgs[0].Data[unix.SizeofRtMsg:])
	if err != nil {
		return Path{}, err
	}
	p := Path{Src: src}
	hop := dst
	for _, a := range attrs {
		switch a.Type {
		case unix.RTA_OIF:
			p.Ifindex = int(binary.NativeEndian.Uint32(a.Value))
		case unix.RTA_GATEWAY:
			hop, _ = netip.AddrFromSlice(a.Value)
		case unix.RTA_VIA, unix.RTA_MULTIPATH:
			return Path{}, &Refusal{fmt.Sprintf("route to %s through a next hop of another family or several", dst), false}
		case unix.RTA_ENCAP, unix.RTA_ENCAP_TYPE:
			return Path{}, &Refusal{fmt.Sprintf("route to %s encapsulates (lwtunnel)", dst), false}
		case unix.RTA_PREFSRC:
			if !src.IsValid() || src.IsUnspecified() {
				p.Src, _ = netip.AddrFromSlice(a.Value)
			}
		case unix.RTA_METRICS:
			m, err := readMetrics(a.Value)
			if err != nil {
				return Path{}, &Refusal{fmt.Sprintf("route to %s: %v", dst, err), false}
			}
			p.MTU = m
		}
	}
	if p.Ifindex == 0 || !p.Src.IsValid() || p.Src.IsUnspecified() {
		return Path{}, &Refusal{fmt.Sprintf("route to %s names no interface or source", dst), false}
	}
	ifi, err := interfaceByIndex(p.Ifindex)
	if err != nil {
		return Path{}, fmt.Errorf("egress: interface %d: %w", p.Ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 || ifi.Flags&net.FlagLoopback != 0 {
		return Path{}, &Refusal{fmt.Sprintf("route to %s out of %s, not an Ethernet interface", dst, ifi.Name), false}
	}
	if dst.Is6() {
		if p.HopLimit, p.DefaultHopLimit, err = hopLimits(ifi.Name); err != nil {
			return Path{}, &Refusal{fmt.Sprintf("route to %s: %v", dst, err), false}
		}
	}
	copy(p.SrcMAC[:], ifi.HardwareAddr)
	if p.MTU == 0 || ifi.MTU < p.MTU {
		p.MTU = ifi.MTU
	}
	if p.DstMAC, p.Confirmed, err = neighbour(p.Ifindex, hop.Unmap()); err != nil {
		return Path{}, err
	}
	return p, nil
}

// interfaceByIndex is one interface's name, flags, MTU and address, as
// one RTM_GETLINK for it reads them (net.InterfaceByIndex dumps every
// link, hundreds on a container host, for each lookup).
func interfaceByIndex(index int) (*net.Interface, error) {
	info := unix.IfInfomsg{Index: int32(index)}
	body := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&info)), unix.SizeofIfInfomsg)...)
	msgs, err := rtnl.Request(unix.NETLINK_ROUTE, unix.RTM_GETLINK, 0, body)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 || msgs[0].Header.Type != unix.RTM_NEWLINK || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return nil, errors.New("unexpected answer")
	}
	got := (*unix.IfInfomsg)(unsafe.Pointer(&msgs[0].Data[0]))
	attrs, err := rtnl.Attrs(msgs[0].Data[unix.SizeofIfInfomsg:])
	if err != nil {
		return nil, err
	}
	ifi := &net.Interface{Index: int(got.Index)}
	if got.Flags&unix.IFF_UP != 0 {
		ifi.Flags |= net.FlagUp
	}
	if got.Flags&unix.IFF_LOOPBACK != 0 {
		ifi.Flags |= net.FlagLoopback
	}
	for _, a := range attrs {
		switch a.Type {
		case unix.IFLA_IFNAME:
			ifi.Name = rtnl.CString(a.Value)
		case unix.IFLA_MTU:
			if len(a.Value) >= 4 {
				ifi.MTU = int(binary.NativeEndian.Uint32(a.Value))
			}
		case unix.IFLA_ADDRESS:
			ifi.HardwareAddr = net.HardwareAddr(append([]byte(nil), a.Value...))
		}
	}
	return ifi, nil
}

// readMetrics reads a route's metrics: its MTU (0: none), or an error for
// what a frame built by hand would not follow: a locked MTU (the kernel
// then sends without DF) or a hop limit of the route's own.
func readMetrics(b []byte) (int, error) {
	metrics, err := rtnl.Attrs(b)
	if err != nil {
		return 0, err
	}
	mtu := 0
	for _, m := range metrics {
		if len(m.Value) < 4 {
			continue
		}
		v := binary.NativeEndian.Uint32(m.Value)
		switch m.Type {
		case unix.RTAX_MTU:
			mtu = int(v)
		case unix.RTAX_LOCK:
			if v&(1<<unix.RTAX_MTU) != 0 {
				return 0, errors.New("its MTU is locked")
			}
		case unix.RTAX_HOPLIMIT:
			return 0, errors.New("it sets a hop limit")
		}
	}
	return mtu, nil
}

// hopLimits are the interface's IPv6 hop limit (what the kernel sends
// with where the socket sets none; router advertisements change it) and
// the namespace's default (what such a socket's IPV6_UNICAST_HOPS reads).
func hopLimits(iface string) (int, int, error) {
	read := func(name string) (int, error) {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + name + "/hop_limit")
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	own, err := read(iface)
	if err != nil {
		return 0, 0, err
	}
	all, err := read("all")
	return own, all, err
}

// neighbour is the link-layer address of hop on ifindex, as "ip neigh
// get" reads it, and whether the entry is confirmed. An entry being
// resolved (or failed, or none) is a Refusal: the kernel resolves it as it
// sends.
func neighbour(ifindex int, hop netip.Addr) ([6]byte, bool, error) {
	family := uint8(unix.AF_INET)
	if hop.Is6() {
		family = unix.AF_INET6
	}
	nd := unix.NdMsg{Family: family, Ifindex: int32(ifindex)}
	body := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&nd)), unix.SizeofNdMsg)...)
	body = rtnl.AppendAttr(body, unix.NDA_DST, hop.AsSlice())
	msgs, err := rtnl.Request(unix.NETLINK_ROUTE, unix.RTM_GETNEIGH, 0, body)
	if errors.Is(err, syscall.ENOENT) {
		return [6]byte{}, false, &Refusal{fmt.Sprintf("no neighbour entry for %s yet", hop), true}
	}
	if err != nil {
		return [6]byte{}, false, fmt.Errorf("egress: neighbour %s: %w", hop, err)
	}
	if len(msgs) != 1 || len(msgs[0].Data) < unix.SizeofNdMsg {
		return [6]byte{}, false, fmt.Errorf("egress: neighbour %s: unexpected answer", hop)
	}
	got := (*unix.NdMsg)(unsafe.Pointer(&msgs[0].Data[0]))
	attrs, err := rtnl.Attrs(msgs[0].Data[unix.SizeofNdMsg:])
	if err != nil {
		return [6]byte{}, false, err
	}
	var mac [6]byte
	found := false
	for _, a := range attrs {
		if a.Type == unix.NDA_LLADDR && len(a.Value) == 6 {
			copy(mac[:], a.Value)
			found = true
		}
	}
	usable := got.State&(nudReachable|nudStale|nudDelay|nudProbe|nudPermanent) != 0
	if !found || !usable {
		return [6]byte{}, false, &Refusal{fmt.Sprintf("neighbour %s in state %#x", hop, got.State), true}
	}
	return mac, got.State&(nudReachable|nudPermanent) != 0, nil
}
