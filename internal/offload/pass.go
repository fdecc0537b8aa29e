package offload

import (
	"fmt"
	"io"
	"net"

	"github.com/cilium/ebpf/link"
)

// AttachPass attaches a program that passes every packet (bpf/xdp_pass.c) to
// an interface in the calling thread's namespace. On a veth, frames that the
// other end sends with XDP_TX or XDP_REDIRECT are only received when this end
// runs XDP, so the testbed puts it on the far ends of its veths.
func AttachPass(ifname string) (io.Closer, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	var objs xdppassObjects
	if err := loadXdppassObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("offload: load pass program: %w", err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpPass, Interface: iface.Index, Flags: link.XDPDriverMode})
	if err != nil {
		objs.Close()
		return nil, fmt.Errorf("offload: attach pass program to %s: %w", ifname, err)
	}
	return closers{l, &objs}, nil
}

type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
