// Package rtnl speaks netlink as the kernel's rtnetlink, nfnetlink and xfrm
// families do: one request and its answers, attributes read and written.
package rtnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Request sends one netlink message (type typ, flags besides
// NLM_F_REQUEST, body) on a socket of protocol proto and returns the
// answers, up to NLMSG_DONE for a dump. An NLMSG_ERROR with an error
// comes back as that errno.
func Request(proto int, typ uint16, flags uint16, body []byte) ([]syscall.NetlinkMessage, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	msg = append(msg, body...)
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	*hdr = unix.NlMsghdr{Len: uint32(len(msg)), Type: typ, Flags: unix.NLM_F_REQUEST | flags, Seq: 1}
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out []syscall.NetlinkMessage
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("netlink: short error message")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return nil, syscall.Errno(-errno)
				}
				return out, nil // an acknowledgement
			}
			out = append(out, m)
		}
		if flags&unix.NLM_F_DUMP == 0 && len(out) > 0 {
			return out, nil
		}
	}
}

// Attr is one netlink attribute (its type without the nested and
// byte-order flags).
type Attr struct {
	Type  uint16
	Value []byte
}

// Attrs reads the attributes in b; a malformed one is an error.
func Attrs(b []byte) ([]Attr, error) {
	out, rest := walk(b)
	if len(rest) >= unix.SizeofRtAttr {
		return nil, fmt.Errorf("netlink: attribute of %d bytes in %d", binary.NativeEndian.Uint16(rest), len(rest))
	}
	return out, nil
}

// AttrMap is the attributes of b by type (the last of a type), up to a
// malformed one.
func AttrMap(b []byte) map[uint16][]byte {
	attrs, _ := walk(b)
	out := make(map[uint16][]byte, len(attrs))
	for _, a := range attrs {
		out[a.Type] = a.Value
	}
	return out
}

// walk reads attributes from b up to the end or a malformed one (rest).
func walk(b []byte) (out []Attr, rest []byte) {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		t := binary.NativeEndian.Uint16(b[2:])
		if l < unix.SizeofRtAttr || l > len(b) {
			return out, b
		}
		out = append(out, Attr{Type: t &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER), Value: b[unix.SizeofRtAttr:l]})
		b = b[min(len(b), (l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1)):]
	}
	return out, nil
}

// AppendAttr appends an attribute of type t and value v, padded.
func AppendAttr(b []byte, t uint16, v []byte) []byte {
	l := unix.SizeofRtAttr + len(v)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, t)
	b = append(b, v...)
	for range (l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1) - l {
		b = append(b, 0)
	}
	return b
}

// CString is a NUL-terminated attribute's string.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
