package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// linkInfo is what choosing a hook needs to know about an interface, read
// over rtnetlink (RTM_GETLINK).
type linkInfo struct {
	kind        string // IFLA_INFO_KIND: "veth", "bridge"...; "" for a device without one (physical)
	peerIndex   int    // veth: the peer's ifindex (IFLA_LINK)
	peerNetnsID int    // veth: the peer's namespace id (IFLA_LINK_NETNSID), -1 for this one
	xdpAttached bool   // an XDP program runs on it in the driver (IFLA_XDP_ATTACHED: not generic mode, which takes no XDP frames)
}

// readLink reads interface index, in the namespace with id netnsID as this
// one numbers it (IFLA_TARGET_NETNSID), or in this namespace for -1.
func readLink(index, netnsID int) (linkInfo, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return linkInfo{}, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, getLinkRequest(index, netnsID), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return linkInfo{}, fmt.Errorf("RTM_GETLINK: %w", err)
	}
	buf := make([]byte, 1<<16)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return linkInfo{}, fmt.Errorf("RTM_GETLINK: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return linkInfo{}, fmt.Errorf("RTM_GETLINK: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return linkInfo{}, fmt.Errorf("RTM_GETLINK ifindex %d (netns id %d): %w", index, netnsID, syscall.Errno(errno))
				}
			}
		case unix.RTM_NEWLINK:
			return parseLink(m.Data)
		}
	}
	return linkInfo{}, fmt.Errorf("RTM_GETLINK ifindex %d: no answer", index)
}

func getLinkRequest(index, netnsID int) []byte {
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	info := (*unix.IfInfomsg)(unsafe.Pointer(&msg[unix.SizeofNlMsghdr]))
	info.Family = unix.AF_UNSPEC
	info.Index = int32(index)
	if netnsID >= 0 {
		msg = appendAttr(msg, unix.IFLA_TARGET_NETNSID, binary.NativeEndian.AppendUint32(nil, uint32(netnsID)))
	}
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	hdr.Len = uint32(len(msg))
	hdr.Type = unix.RTM_GETLINK
	hdr.Flags = unix.NLM_F_REQUEST
	hdr.Seq = 1
	return msg
}

func appendAttr(b []byte, typ uint16, value []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(value)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// attrs splits a run of rtattrs (also nested ones) by type.
func attrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ unix.NLA_F_NESTED
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		out[typ] = b[unix.SizeofRtAttr:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out
}

func parseLink(data []byte) (linkInfo, error) {
	if len(data) < unix.SizeofIfInfomsg {
		return linkInfo{}, fmt.Errorf("RTM_NEWLINK: %d bytes", len(data))
	}
	li := linkInfo{peerNetnsID: -1}
	a := attrs(data[unix.SizeofIfInfomsg:])
	if v := a[unix.IFLA_LINKINFO]; v != nil {
		if kind := attrs(v)[unix.IFLA_INFO_KIND]; kind != nil {
			li.kind = string(bytes.TrimRight(kind, "\x00"))
		}
	}
	if v := a[unix.IFLA_LINK]; len(v) >= 4 {
		li.peerIndex = int(binary.NativeEndian.Uint32(v))
	}
	if v := a[unix.IFLA_LINK_NETNSID]; len(v) >= 4 {
		li.peerNetnsID = int(int32(binary.NativeEndian.Uint32(v)))
	}
	if v := a[unix.IFLA_XDP]; v != nil {
		if att := attrs(v)[unix.IFLA_XDP_ATTACHED]; len(att) >= 1 {
			li.xdpAttached = att[0] != xdpAttachedNone && att[0] != xdpAttachedSKB
		}
	}
	return li, nil
}

// IFLA_XDP_ATTACHED values (linux/if_link.h).
const (
	xdpAttachedNone = 0
	xdpAttachedSKB  = 2 // generic XDP
)
