package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/rtnl"
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
	info := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)}
	body := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&info)), unix.SizeofIfInfomsg)...)
	if netnsID >= 0 {
		body = rtnl.AppendAttr(body, unix.IFLA_TARGET_NETNSID, binary.NativeEndian.AppendUint32(nil, uint32(netnsID)))
	}
	msgs, err := rtnl.Request(unix.NETLINK_ROUTE, unix.RTM_GETLINK, 0, body)
	if err != nil {
		return linkInfo{}, fmt.Errorf("RTM_GETLINK ifindex %d (netns id %d): %w", index, netnsID, err)
	}
	for _, m := range msgs {
		if m.Header.Type == unix.RTM_NEWLINK {
			return parseLink(m.Data)
		}
	}
	return linkInfo{}, fmt.Errorf("RTM_GETLINK ifindex %d: no answer", index)
}

func parseLink(data []byte) (linkInfo, error) {
	if len(data) < unix.SizeofIfInfomsg {
		return linkInfo{}, fmt.Errorf("RTM_NEWLINK: %d bytes", len(data))
	}
	li := linkInfo{peerNetnsID: -1}
	a := rtnl.AttrMap(data[unix.SizeofIfInfomsg:])
	if v := a[unix.IFLA_LINKINFO]; v != nil {
		if kind := rtnl.AttrMap(v)[unix.IFLA_INFO_KIND]; kind != nil {
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
		if att := rtnl.AttrMap(v)[unix.IFLA_XDP_ATTACHED]; len(att) >= 1 {
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
