package bench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The saturation trial keeps the relay's core busy with an in-kernel
// generator (bpf/bench_traffic.c): frames sent from the far ends' veths
// with BPF_PROG_TEST_RUN in live-frame mode, counted and dropped by a TC
// program at the far ends. The socket generator cannot outrun a one-core
// relay on the other CPU, so its highest loss-free rate leaves the relay
// core partly idle and every packet pays a NAPI wakeup. Saturated, polls
// carry many packets, and what the core spends per packet is the relay's
// work; the rate it delivers is its one-core capacity, measured.
type liveTraffic struct {
	objs  trafficObjects
	sinks []link.Link
}

// framesPerRun is how many copies of one flow's frame a test run sends
// before the next flow's. Each run costs tens of ms to set up (a page
// pool), then sends at several million frames/s, far above what the
// relay takes: its ring fills and it polls full batches for as long as
// the run lasts. The frames its ring had no room for are dropped there, on
// the sending CPU, and never reach the relay core.
const framesPerRun = 1 << 18

// xdpMD is struct xdp_md as BPF_PROG_TEST_RUN takes it.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

func newLiveTraffic(tb *testbed.Testbed) (*liveTraffic, error) {
	lt := &liveTraffic{}
	if err := loadTrafficObjects(&lt.objs, nil); err != nil {
		return nil, fmt.Errorf("load the traffic programs: %w", err)
	}
	for _, end := range tb.Links() {
		err := end.Far.Do(func() error {
			ifi, err := net.InterfaceByName(end.FarIface)
			if err != nil {
				return err
			}
			l, err := link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: lt.objs.TcSink, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			lt.sinks = append(lt.sinks, l)
			return nil
		})
		if err != nil {
			lt.close()
			return nil, fmt.Errorf("attach the sink on %s: %w", end.FarIface, err)
		}
	}
	return lt, nil
}

func (lt *liveTraffic) close() {
	for _, l := range lt.sinks {
		_ = l.Close()
	}
	lt.objs.Close()
}

// sink counts and drops datagrams to these IPv4 addresses at the far ends,
// each address's datagrams with this payload length.
func (lt *liveTraffic) sink(ports map[netip.AddrPort]uint16) error {
	for to, size := range ports {
		key := trafficSinkKey{Daddr: netorder.IPv4(to.Addr()), Dport: netorder.Port(to.Port())}
		if err := lt.objs.SinkPorts.Put(key, size); err != nil {
			return err
		}
	}
	return nil
}

// sunk is how many datagrams the sinks have counted.
func (lt *liveTraffic) sunk() (uint64, error) {
	var perCPU []uint64
	if err := lt.objs.Sunk.Lookup(uint32(0), &perCPU); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// liveSender sends template frames out of one far end's veth.
type liveSender struct {
	ns     *netns.NS
	iface  string
	frames [][]byte
	// number, if set, numbers the frames (xdp_send's number_at).
	number *frameNumber
}

// frameNumber is where xdp_send writes a number of each frame's own: a
// 16-bit big-endian counter at At, from First, the UDP checksum at
// UDPChecksumAt.
type frameNumber struct {
	At, UDPChecksumAt uint32
	First             uint16
}

// numberFrames makes xdp_send number its frames as n says.
func (lt *liveTraffic) numberFrames(n frameNumber) error {
	return errors.Join(lt.objs.NumberAt.Set(n.At), lt.objs.UdpCsumAt.Set(n.UDPChecksumAt), lt.objs.NextNumber.Set(uint32(n.First)))
}

// run sends frames in turn, framesPerRun at a time, until stop closes;
// it adds what it handed to the veth to sent.
func (s *liveSender) run(prog *ebpf.Program, stop <-chan struct{}, sent *atomic.Uint64) error {
	return s.ns.Do(func() error {
		ifi, err := net.InterfaceByName(s.iface)
		if err != nil {
			return err
		}
		// Below the far ends' NAPI threads on the generator's CPU, which
		// must take what the relay delivers.
		if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19); err != nil {
			return err
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return nil
			default:
			}
			f := s.frames[i%len(s.frames)]
			_, err := prog.Run(&ebpf.RunOptions{
				Data: f, Repeat: framesPerRun, Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES,
				Context: xdpMD{DataEnd: uint32(len(f)), IngressIfindex: uint32(ifi.Index)},
			})
			if err != nil {
				return fmt.Errorf("live frames on %s: %w", s.iface, err)
			}
			sent.Add(framesPerRun)
		}
	})
}

// saturation is what one saturation trial measured.
type saturation struct {
	sent, delivered uint64
	duration        time.Duration
	relayNs         uint64
	// nextNumber is the number xdp_send would have given the next frame
	// (numbered senders), read from its counter: sent undercounts what it
	// numbered (a run interrupted by a signal is run again whole and
	// counted once).
	nextNumber uint16
}

// saturate runs the in-kernel generator over every flow, both directions,
// for d, and reads the relay core around it.
func saturate(e *env, flows []*flow, size int, d time.Duration) (*saturation, error) {
	fwd, rev, ports, err := templates(e.tb, flows, size)
	if err != nil {
		return nil, err
	}
	return saturateWith(e, []*liveSender{
		{ns: e.tb.Client, iface: testbed.ClientIface, frames: fwd},
		{ns: e.tb.Peer, iface: testbed.PeerIface, frames: rev},
	}, ports, d)
}

// saturateWith sends the senders' frames for d with the in-kernel
// generator, the far ends' sinks counting what reaches these ports (with
// these payload lengths), and reads the relay core around it.
func saturateWith(e *env, senders []*liveSender, ports map[netip.AddrPort]uint16, d time.Duration) (*saturation, error) {
	lt, err := newLiveTraffic(e.tb)
	if err != nil {
		return nil, err
	}
	defer lt.close()
	if err := lt.sink(ports); err != nil {
		return nil, err
	}
	for _, s := range senders {
		if s.number != nil {
			if err := lt.numberFrames(*s.number); err != nil {
				return nil, err
			}
		}
	}
	before, err := e.core.sample(e.relayTasks)
	if err != nil {
		return nil, err
	}
	sunkBefore, err := lt.sunk()
	if err != nil {
		return nil, err
	}
	var sent atomic.Uint64
	stop := make(chan struct{})
	errs := make(chan error, len(senders))
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.run(lt.objs.XdpSend, stop, &sent)
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(100 * time.Millisecond) // in flight
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	after, err := e.core.sample(e.relayTasks)
	if err != nil {
		return nil, err
	}
	sunkAfter, err := lt.sunk()
	if err != nil {
		return nil, err
	}
	if sunkAfter == sunkBefore {
		return nil, errors.New("saturation trial: nothing delivered")
	}
	var next uint32
	if err := lt.objs.NextNumber.Get(&next); err != nil {
		return nil, err
	}
	return &saturation{sent: sent.Load(), delivered: sunkAfter - sunkBefore, duration: elapsed,
		relayNs: after.relayNsSince(before), nextNumber: uint16(next)}, nil
}

// templates builds each flow's frames as its sockets would send them, from
// the far ends' veths to the server's, and the ports their datagrams are
// delivered to with their payload length there.
func templates(tb *testbed.Testbed, flows []*flow, size int) (fwd, rev [][]byte, ports map[netip.AddrPort]uint16, err error) {
	cliMAC, err1 := ifaceMAC(tb.Client, testbed.ClientIface)
	srvCliMAC, err2 := ifaceMAC(tb.Server, testbed.ServerCliIface)
	peerMAC, err3 := ifaceMAC(tb.Peer, testbed.PeerIface)
	srvPeerMAC, err4 := ifaceMAC(tb.Server, testbed.ServerPeerIface)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, nil, nil, err
	}
	ports = map[netip.AddrPort]uint16{}
	for _, f := range flows {
		client, peer := addrPort(f.client.LocalAddr()), addrPort(f.peer.LocalAddr())
		data := make([]byte, size)
		copy(data, "ebrtc bench live frame")
		fwdPayload := data
		if f.fwd.prefix != nil {
			fwdPayload = frame.ChannelData(uint16(f.fwd.prefix[0])<<8|uint16(f.fwd.prefix[1]), data, 0, 0)
		}
		fwd = append(fwd, frame.UDP{SrcMAC: cliMAC, DstMAC: srvCliMAC, Src: client, Dst: addrPort(f.fwd.dst),
			TTL: 64, DF: true, Payload: fwdPayload}.Marshal())
		rev = append(rev, frame.UDP{SrcMAC: peerMAC, DstMAC: srvPeerMAC, Src: peer, Dst: addrPort(f.rev.dst),
			TTL: 64, DF: true, Payload: data}.Marshal())
		// The peer gets the data; the client, ChannelData where a TURN relay frames it.
		ports[peer] = uint16(size)
		ports[client] = uint16(size + len(f.fwd.prefix))
	}
	return fwd, rev, ports, nil
}

func addrPort(a net.Addr) netip.AddrPort {
	ap := a.(*net.UDPAddr).AddrPort()
	return addrport.Unmap(ap)
}

func ifaceMAC(ns *netns.NS, name string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		return nil
	})
	return mac, err
}
