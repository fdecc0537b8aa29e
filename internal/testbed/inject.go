package testbed

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
)

// Inject sends a crafted frame out of ifname in ns, towards the interface
// peerIf of peerNS at the far end of its veth: what an attacker on that
// link can send, spoofed source addresses included.
func Inject(ns *netns.NS, ifname string, peerNS *netns.NS, peerIf string, u frame.UDP) error {
	var dst net.HardwareAddr
	if err := peerNS.Do(func() error {
		ifc, err := net.InterfaceByName(peerIf)
		if err == nil {
			dst = ifc.HardwareAddr
		}
		return err
	}); err != nil {
		return err
	}
	return ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		u.SrcMAC, u.DstMAC = ifc.HardwareAddr, dst
		if u.TTL == 0 {
			u.TTL = 64
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("inject: %w", err)
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, u.Marshal(), 0, &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6})
	})
}
