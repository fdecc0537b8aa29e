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

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// LiveTraffic is the in-kernel generator (bpf/bench_traffic.c), with
// which a saturation trial keeps the relay's core busy: frames sent from
// the far ends' veths with BPF_PROG_TEST_RUN in live-frame mode, counted
// and dropped by a TC program at the far ends. The socket generator cannot outrun a one-core
// relay on the other CPU, so its highest loss-free rate leaves the relay
// core partly idle and every packet pays a NAPI wakeup. Saturated, polls
// carry many packets, and what the core spends per packet is the relay's
// work; the rate it delivers is its one-core capacity, measured.
type LiveTraffic struct {
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

// NewLiveTraffic loads the in-kernel generator and attaches its sinks at
// the far ends of the testbed's veths.
func NewLiveTraffic(tb *testbed.Testbed) (*LiveTraffic, error) {
	lt := &LiveTraffic{}
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
			lt.Close()
			return nil, fmt.Errorf("attach the sink on %s: %w", end.FarIface, err)
		}
	}
	return lt, nil
}

// Close detaches the sinks and unloads the generator.
func (lt *LiveTraffic) Close() {
	for _, l := range lt.sinks {
		_ = l.Close()
	}
	lt.objs.Close()
}

// Sink counts and drops datagrams to these IPv4 addresses at the far ends,
// each address's datagrams with this payload length (0xffff: any).
func (lt *LiveTraffic) Sink(ports map[netip.AddrPort]uint16) error {
	for to, size := range ports {
		key := trafficSinkKey{Daddr: netorder.IPv4(to.Addr()), Dport: netorder.Port(to.Port())}
		if err := lt.objs.SinkPorts.Put(key, size); err != nil {
			return err
		}
	}
	return nil
}

// Sunk is how many datagrams the sinks have counted.
func (lt *LiveTraffic) Sunk() (uint64, error) {
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

// LiveSender sends template frames out of one far end's veth.
type LiveSender struct {
	NS     *netns.NS
	Iface  string
	Frames [][]byte
	// Number, if set, numbers the frames (xdp_send's number_at).
	Number *FrameNumber
}

// FrameNumber is where xdp_send writes a number of each frame's own: a
// 16-bit big-endian counter at At, from First, the UDP checksum at
// UDPChecksumAt.
type FrameNumber struct {
	At, UDPChecksumAt uint32
	First             uint16
}

// numberFrames makes xdp_send number its frames as n says.
func (lt *LiveTraffic) numberFrames(n FrameNumber) error {
	return errors.Join(lt.objs.NumberAt.Set(n.At), lt.objs.UdpCsumAt.Set(n.UDPChecksumAt), lt.objs.NextNumber.Set(uint32(n.First)))
}

// run sends frames in turn, framesPerRun at a time, until stop closes;
// it adds what it handed to the veth to sent.
func (s *LiveSender) run(prog *ebpf.Program, stop <-chan struct{}, sent *atomic.Uint64) error {
	return s.NS.Do(func() error {
		ifi, err := net.InterfaceByName(s.Iface)
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
			f := s.Frames[i%len(s.Frames)]
			_, err := prog.Run(&ebpf.RunOptions{
				Data: f, Repeat: framesPerRun, Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES,
				Context: xdpMD{DataEnd: uint32(len(f)), IngressIfindex: uint32(ifi.Index)},
			})
			if err != nil {
				return fmt.Errorf("live frames on %s: %w", s.Iface, err)
			}
			sent.Add(framesPerRun)
		}
	})
}

// Saturation is what one saturation trial measured: the frames handed to
// the veths, those the sinks counted, and the relay core's time.
type Saturation struct {
	Sent, Delivered uint64
	Duration        time.Duration
	RelayNs         uint64
	// NextNumber is the number xdp_send would have given the next frame
	// (numbered senders), read from its counter: sent undercounts what it
	// numbered (a run interrupted by a signal is run again whole and
	// counted once).
	NextNumber uint16
}

// Saturate sends the senders' frames for d with the in-kernel generator,
// the far ends' sinks counting what reaches these ports (with these
// payload lengths), and reads the relay core around it (isolated runs).
func (e *Env) Saturate(senders []*LiveSender, ports map[netip.AddrPort]uint16, d time.Duration) (*Saturation, error) {
	lt, err := NewLiveTraffic(e.Testbed)
	if err != nil {
		return nil, err
	}
	defer lt.Close()
	if err := lt.Sink(ports); err != nil {
		return nil, err
	}
	for _, s := range senders {
		if s.Number != nil {
			if err := lt.numberFrames(*s.Number); err != nil {
				return nil, err
			}
		}
	}
	before, err := e.SampleCore()
	if err != nil {
		return nil, err
	}
	sunkBefore, err := lt.Sunk()
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
	after, err := e.SampleCore()
	if err != nil {
		return nil, err
	}
	sunkAfter, err := lt.Sunk()
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
	return &Saturation{Sent: sent.Load(), Delivered: sunkAfter - sunkBefore, Duration: elapsed,
		RelayNs: after.RelayNsSince(before), NextNumber: uint16(next)}, nil
}

// IfaceMAC is the named interface's MAC address in ns: the frames the
// in-kernel generator sends are built whole.
func IfaceMAC(ns *netns.NS, name string) (net.HardwareAddr, error) {
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
