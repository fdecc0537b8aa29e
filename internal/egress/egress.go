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
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Path is where the kernel sends a datagram to an address: out of
// Ifindex, from Src (the route's preferred source where the sender did
// not bind one), to the next hop's link-layer address.
type Path struct {
	Ifindex        int
	Src            netip.Addr
	SrcMAC, DstMAC [6]byte
	MTU            int // the route's, else the interface's
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

// Lookup asks the kernel for the path of a datagram from src (the bound
// address; unspecified: the route's choice) to dst: the route, as
// "ip route get dst from src" (policy rules and all), then the next hop's
// neighbour entry. A route of another type (local, blackhole,
// unreachable, prohibit), one through a multipath next hop the kernel
// picks per flow, a neighbour without a link-layer address, are Refusals;
// other errors are the kernel's (ENETUNREACH, say).
func Lookup(dst, src netip.Addr) (Path, error) {
	dst, src = dst.Unmap(), src.Unmap()
	family, bits := unix.AF_INET, 32
	if dst.Is6() {
		family, bits = unix.AF_INET6, 128
	}
	rt := unix.RtMsg{Family: uint8(family), Dst_len: uint8(bits)}
	body := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&rt)), unix.SizeofRtMsg)...)
	body = appendAttr(body, unix.RTA_DST, dst.AsSlice())
	if src.IsValid() && !src.IsUnspecified() && src.Is6() == dst.Is6() {
		body[2] = uint8(bits) // rtm_src_len
		body = appendAttr(body, unix.RTA_SRC, src.AsSlice())
	}
	msgs, err := request(unix.NETLINK_ROUTE, unix.RTM_GETROUTE, 0, body)
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
	attrs, err := parseAttrs(msgs[0].Data[unix.SizeofRtMsg:])
	if err != nil {
		return Path{}, err
	}
	p := Path{Src: src}
	hop := dst
	for _, a := range attrs {
		switch a.typ {
		case unix.RTA_OIF:
			p.Ifindex = int(binary.NativeEndian.Uint32(a.value))
		case unix.RTA_GATEWAY:
			hop, _ = netip.AddrFromSlice(a.value)
		case unix.RTA_VIA, unix.RTA_MULTIPATH:
			return Path{}, &Refusal{fmt.Sprintf("route to %s through a next hop of another family or several", dst), false}
		case unix.RTA_PREFSRC:
			if !src.IsValid() || src.IsUnspecified() {
				p.Src, _ = netip.AddrFromSlice(a.value)
			}
		case unix.RTA_METRICS:
			p.MTU = routeMTU(a.value)
		}
	}
	if p.Ifindex == 0 || !p.Src.IsValid() || p.Src.IsUnspecified() {
		return Path{}, &Refusal{fmt.Sprintf("route to %s names no interface or source", dst), false}
	}
	ifi, err := net.InterfaceByIndex(p.Ifindex)
	if err != nil {
		return Path{}, fmt.Errorf("egress: interface %d: %w", p.Ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 || ifi.Flags&net.FlagLoopback != 0 {
		return Path{}, &Refusal{fmt.Sprintf("route to %s out of %s, not an Ethernet interface", dst, ifi.Name), false}
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

// routeMTU is RTAX_MTU in a route's metrics (0: none).
func routeMTU(b []byte) int {
	metrics, err := parseAttrs(b)
	if err != nil {
		return 0
	}
	for _, m := range metrics {
		if m.typ == unix.RTAX_MTU && len(m.value) >= 4 {
			return int(binary.NativeEndian.Uint32(m.value))
		}
	}
	return 0
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
	body = appendAttr(body, unix.NDA_DST, hop.AsSlice())
	msgs, err := request(unix.NETLINK_ROUTE, unix.RTM_GETNEIGH, 0, body)
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
	attrs, err := parseAttrs(msgs[0].Data[unix.SizeofNdMsg:])
	if err != nil {
		return [6]byte{}, false, err
	}
	var mac [6]byte
	found := false
	for _, a := range attrs {
		if a.typ == unix.NDA_LLADDR && len(a.value) == 6 {
			copy(mac[:], a.value)
			found = true
		}
	}
	usable := got.State&(nudReachable|nudStale|nudDelay|nudProbe|nudPermanent) != 0
	if !found || !usable {
		return [6]byte{}, false, &Refusal{fmt.Sprintf("neighbour %s in state %#x", hop, got.State), true}
	}
	return mac, got.State&(nudReachable|nudPermanent) != 0, nil
}

// Bypassed says what a frame handed to ifindex's driver directly would
// pass by that the kernel's own sending would not ("" if nothing): a root
// qdisc that may delay or drop (anything but noqueue, a FIFO, fq_codel or
// mq of those), a clsact qdisc (TC egress programs), an nftables chain on
// the IPv4, IPv6 or inet output or postrouting hooks or the interface's
// netdev egress hook, or a legacy iptables table.
func Bypassed(ifindex int) (string, error) {
	if why, err := qdiscs(ifindex); why != "" || err != nil {
		return why, err
	}
	if why, err := nftChains(ifindex); why != "" || err != nil {
		return why, err
	}
	return legacyTables(), nil
}

// Qdiscs a sender may pass by: they neither shape nor drop but when full.
var passable = map[string]bool{"noqueue": true, "pfifo_fast": true, "pfifo": true, "bfifo": true, "fq_codel": true, "mq": true, "ingress": true}

func qdiscs(ifindex int) (string, error) {
	var tc [20]byte // struct tcmsg: family, pads, ifindex, handle, parent, info
	binary.NativeEndian.PutUint32(tc[4:], uint32(ifindex))
	msgs, err := request(unix.NETLINK_ROUTE, unix.RTM_GETQDISC, unix.NLM_F_DUMP, tc[:])
	if err != nil {
		return "", fmt.Errorf("egress: qdiscs: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWQDISC || len(m.Data) < len(tc) || int(binary.NativeEndian.Uint32(m.Data[4:])) != ifindex {
			continue
		}
		attrs, err := parseAttrs(m.Data[len(tc):])
		if err != nil {
			return "", err
		}
		for _, a := range attrs {
			if a.typ != unix.TCA_KIND {
				continue
			}
			if kind := cString(a.value); !passable[kind] {
				return "qdisc " + kind, nil
			}
		}
	}
	return "", nil
}

// nftables (linux/netfilter/nf_tables.h, nfnetlink.h).
const (
	nfnlSubsysNFTables = 10
	nftMsgNewChain     = 3
	nftMsgGetChain     = 4
	nftaChainTable     = 1
	nftaChainName      = 3
	nftaChainHook      = 4
	nftaHookHooknum    = 1
	nftaHookDev        = 3
	nfprotoInet        = 1
	nfprotoIPv4        = 2
	nfprotoNetdev      = 5
	nfprotoIPv6        = 10
	nfInetLocalOut     = 3
	nfInetPostRouting  = 4
	nfNetdevEgress     = 1
)

func nftChains(ifindex int) (string, error) {
	ifi, _ := net.InterfaceByIndex(ifindex)
	// One dump per family: the answers' nfgenmsg does not say which.
	for _, family := range []uint8{nfprotoInet, nfprotoIPv4, nfprotoIPv6, nfprotoNetdev} {
		msgs, err := request(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgGetChain, unix.NLM_F_DUMP, []byte{family, 0, 0, 0})
		if errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EAFNOSUPPORT) {
			continue // no nf_tables, or not for this family: no chains
		}
		if err != nil {
			return "", fmt.Errorf("egress: nftables chains: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysNFTables<<8|nftMsgNewChain || len(m.Data) < 4 {
				continue
			}
			attrs, err := parseAttrs(m.Data[4:])
			if err != nil {
				return "", err
			}
			var table, name, dev string
			hook := -1
			for _, a := range attrs {
				switch a.typ {
				case nftaChainTable:
					table = cString(a.value)
				case nftaChainName:
					name = cString(a.value)
				case nftaChainHook:
					hook, dev = chainHook(a.value)
				}
			}
			switch {
			case family != nfprotoNetdev && (hook == nfInetLocalOut || hook == nfInetPostRouting),
				family == nfprotoNetdev && hook == nfNetdevEgress && (ifi == nil || dev == ifi.Name):
				return fmt.Sprintf("nftables chain %s %s hooked on %s", table, name, hookName(family, hook)), nil
			}
		}
	}
	return "", nil
}

func chainHook(b []byte) (int, string) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return -1, ""
	}
	hook, dev := -1, ""
	for _, a := range attrs {
		switch {
		case a.typ == nftaHookHooknum && len(a.value) == 4:
			hook = int(binary.BigEndian.Uint32(a.value))
		case a.typ == nftaHookDev:
			dev = cString(a.value)
		}
	}
	return hook, dev
}

func hookName(family uint8, hook int) string {
	switch {
	case family == nfprotoNetdev:
		return "egress"
	case hook == nfInetLocalOut:
		return "output"
	}
	return "postrouting"
}

// legacyTables names an x_tables table loaded in this namespace (its
// hooks run on output whatever its rules), "" if none.
func legacyTables() string {
	for _, f := range []string{"/proc/thread-self/net/ip_tables_names", "/proc/thread-self/net/ip6_tables_names"} {
		b, err := os.ReadFile(f)
		if t := strings.TrimSpace(string(b)); err == nil && t != "" {
			return "iptables (legacy) tables " + strings.ReplaceAll(t, "\n", ", ")
		}
	}
	return ""
}

// Namespace is a network namespace the questions are asked in, whichever
// namespace the asking thread is in (netlink sockets, interface indexes and
// /proc/thread-self/net are the thread's).
type Namespace struct{ f *os.File }

// CurrentNamespace is the calling thread's network namespace.
func CurrentNamespace() (*Namespace, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("egress: network namespace: %w", err)
	}
	return &Namespace{f}, nil
}

// Close lets the namespace go.
func (n *Namespace) Close() error { return n.f.Close() }

// Lookup is Lookup asked in n.
func (n *Namespace) Lookup(dst, src netip.Addr) (p Path, err error) {
	err = n.do(func() error { p, err = Lookup(dst, src); return err })
	return p, err
}

// Bypassed is Bypassed asked in n.
func (n *Namespace) Bypassed(ifindex int) (why string, err error) {
	err = n.do(func() error { why, err = Bypassed(ifindex); return err })
	return why, err
}

// do runs fn on an OS thread switched into n. The thread is never
// unlocked: it ends with the goroutine, never back with the scheduler in
// another namespace.
func (n *Namespace) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("egress: setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
