package turnbench

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// saturate runs the in-kernel generator (bench.LiveTraffic) over every
// flow, both directions, for d, and reads the relay core around it.
func saturate(e *env, flows []*flow, size int, d time.Duration) (*bench.Saturation, error) {
	fwd, rev, ports, err := templates(e.Testbed, flows, size)
	if err != nil {
		return nil, err
	}
	return e.Saturate([]*bench.LiveSender{
		{NS: e.Testbed.Client, Iface: testbed.ClientIface, Frames: fwd},
		{NS: e.Testbed.Peer, Iface: testbed.PeerIface, Frames: rev},
	}, ports, d)
}

// templates builds each flow's frames as its sockets would send them, from
// the far ends' veths to the server's, and the ports their datagrams are
// delivered to with their payload length there.
func templates(tb *testbed.Testbed, flows []*flow, size int) (fwd, rev [][]byte, ports map[netip.AddrPort]uint16, err error) {
	cliMAC, err1 := bench.IfaceMAC(tb.Client, testbed.ClientIface)
	srvCliMAC, err2 := bench.IfaceMAC(tb.Server, testbed.ServerCliIface)
	peerMAC, err3 := bench.IfaceMAC(tb.Peer, testbed.PeerIface)
	srvPeerMAC, err4 := bench.IfaceMAC(tb.Server, testbed.ServerPeerIface)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, nil, nil, err
	}
	ports = map[netip.AddrPort]uint16{}
	for _, f := range flows {
		client, peer := addrPort(f.client.LocalAddr()), addrPort(f.peer.LocalAddr())
		data := make([]byte, size)
		copy(data, "ebrtc bench live frame")
		fwdPayload := data
		if f.fwd.Prefix != nil {
			fwdPayload = frame.ChannelData(uint16(f.fwd.Prefix[0])<<8|uint16(f.fwd.Prefix[1]), data, 0, 0)
		}
		fwd = append(fwd, frame.UDP{SrcMAC: cliMAC, DstMAC: srvCliMAC, Src: client, Dst: addrPort(f.fwd.Dst),
			TTL: 64, DF: true, Payload: fwdPayload}.Marshal())
		rev = append(rev, frame.UDP{SrcMAC: peerMAC, DstMAC: srvPeerMAC, Src: peer, Dst: addrPort(f.rev.Dst),
			TTL: 64, DF: true, Payload: data}.Marshal())
		// The peer gets the data; the client, ChannelData where a TURN relay frames it.
		ports[peer] = uint16(size)
		ports[client] = uint16(size + len(f.fwd.Prefix))
	}
	return fwd, rev, ports, nil
}

func addrPort(a net.Addr) netip.AddrPort {
	ap := a.(*net.UDPAddr).AddrPort()
	return addrport.Unmap(ap)
}
