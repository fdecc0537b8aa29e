package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
	"gonum.org/v1/plot/plotter"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// AFXDPOptions configure `ebrtc bench --afxdp`: the receive path of a
// WebRTC endpoint, through AF_XDP (pkg/afxdp) and through a kernel socket,
// measured side by side.
type AFXDPOptions struct {
	Size        int           // datagram payload bytes
	Rate        float64       // datagrams/s of the latency trials
	Packets     int           // datagrams per latency trial
	Blast       time.Duration // length of a throughput trial (sender at full speed)
	Rounds      int           // kernel, afxdp, kernel, afxdp...: each round runs both
	Pings       int           // datagrams per ping trial (one in flight, no wakeup)
	PionBytes   int           // data channel bytes per pion trial
	PionPackets int           // RTP packets per pion trial (1 kHz)
	Isolate     bool          // the receiver and its interface's NAPI thread alone on the last CPU
	Progress    io.Writer
	Log         io.Writer
}

// QuickAFXDPOptions run in well under a minute.
func QuickAFXDPOptions() AFXDPOptions {
	return AFXDPOptions{Size: 1200, Rate: 10000, Packets: 10000, Blast: 500 * time.Millisecond, Rounds: 4, Pings: 5000, PionBytes: 16 << 20, PionPackets: 1000}
}

// FullAFXDPOptions measure longer.
func FullAFXDPOptions() AFXDPOptions {
	return AFXDPOptions{Size: 1200, Rate: 10000, Packets: 50000, Blast: 3 * time.Second, Rounds: 4, Pings: 20000, PionBytes: 64 << 20, PionPackets: 5000}
}

// AFXDPReport is the result of a run.
type AFXDPReport struct {
	Machine   Machine          `json:"machine"`
	Isolated  bool             `json:"isolated"`
	Size      int              `json:"size"`
	Rate      float64          `json:"rate"`
	Receivers []ReceiverResult `json:"receivers"`
	// MedianRatio is AF_XDP's median receive time over the kernel
	// socket's (target: at most 0.8); WakeupMedianRatio the same with a
	// sleeping receiver.
	MedianRatio       float64      `json:"median_ratio"`
	WakeupMedianRatio float64      `json:"wakeup_median_ratio"`
	Pion              []PionResult `json:"pion"`
	// AtKernelRate: the AF_XDP receiver under a blast at the kernel
	// socket's blast rate (target: under 0.1% via the kernel socket).
	AtKernelRate PacedBlast `json:"at_kernel_rate"`
	// PionRatio is the pion data channel's median throughput through
	// AF_XDP over the kernel socket's (target: at least 1);
	// PionCoreRatio the same of MbpsPerCore.
	PionRatio     float64 `json:"pion_ratio"`
	PionCoreRatio float64 `json:"pion_core_ratio,omitempty"`
	// Senders: the transmit paths' blasts (AF_XDP's TX ring, sendmmsg,
	// UDP GSO); TXCoreRatio is sendmmsg's core time a datagram over
	// AF_XDP's (above 1: AF_XDP sends more a core).
	Senders     []SenderResult `json:"senders"`
	TXCoreRatio float64        `json:"tx_core_ratio,omitempty"`
	Elapsed     time.Duration  `json:"elapsed_ns"`
}

// ReceiverResult is one receive path.
type ReceiverResult struct {
	Name string `json:"name"` // "afxdp" or "kernel"
	// Receive time: from the frame's arrival to the return of the
	// receiver's ReadFrom, the receiver ready (ping trial: one datagram in
	// flight, delivered in softirq on the receiver's CPU before the read,
	// so no wakeup: the receive path's own work). Arrival is the
	// classifier's stamp in the XDP hook (AF_XDP) or the kernel's receive
	// timestamp (SO_TIMESTAMPNS, taken as the stack takes the skb, after
	// the hook: a little later, which favours the kernel socket).
	ReceiveP50Ns float64 `json:"receive_p50_ns"`
	ReceiveP99Ns float64 `json:"receive_p99_ns"`
	// The same from the paced trial: the receiver sleeps between
	// datagrams, so each one's time includes waking it.
	WakeupReceiveP50Ns float64 `json:"wakeup_receive_p50_ns"`
	WakeupReceiveP99Ns float64 `json:"wakeup_receive_p99_ns"`
	// One-way: from the sender's stamp, just before its sendmmsg (the
	// sender's part and the wakeup of the receiving interface's NAPI
	// thread are the same for both).
	OneWayP50Ns float64 `json:"one_way_p50_ns"`
	OneWayP99Ns float64 `json:"one_way_p99_ns"`
	// PPS is what the receiver took in a throughput trial, the sender at
	// full speed.
	PPS float64 `json:"pps"`
	// Blasted: the blasts' datagrams (ViaKernel counts those of every
	// trial through the kernel socket).
	Blasted uint64 `json:"blasted"`
	// BatchPPS is the same blast read up to probeBatch datagrams a call
	// (AF_XDP's ReadBatch, the kernel socket's recvmmsg); BatchBlasted its
	// datagrams, BatchViaKernel those through the kernel socket.
	BatchPPS       float64 `json:"batch_pps"`
	BatchBlasted   uint64  `json:"batch_blasted"`
	BatchViaKernel uint64  `json:"batch_via_kernel,omitempty"`
	// CoreNsPerDatagram: the receiver's core over the blasts (the
	// receiver's and its interface's NAPI thread's run time, isolated
	// only) a datagram, one at a time and in batches: 1e9 over it is what
	// one core would take at most.
	CoreNsPerDatagram      float64 `json:"core_ns_per_datagram,omitempty"`
	BatchCoreNsPerDatagram float64 `json:"batch_core_ns_per_datagram,omitempty"`
	// Lost counts latency-trial datagrams that never arrived.
	Lost    uint64 `json:"lost"`
	Samples int    `json:"samples"`
	// AF_XDP only: datagrams that took the kernel socket, and the mode.
	ViaKernel uint64 `json:"via_kernel,omitempty"`
	Mode      string `json:"mode,omitempty"`
}

// PionResult is a pion/webrtc peer receiving through one path.
type PionResult struct {
	Name string `json:"name"`
	// DataChannelMbps: from the receiver's first message to its last (in a
	// report, the median of the rounds; so are the latencies).
	DataChannelMbps  float64 `json:"data_channel_mbps"`
	DataChannelBytes int     `json:"data_channel_bytes"`
	Rounds           int     `json:"rounds,omitempty"`
	// ReceiverCore: how busy the receiver's core was over the trial (its
	// threads' and its NAPI thread's run time over the time; isolated only).
	ReceiverCore float64 `json:"receiver_core,omitempty"`
	// MbpsPerCore is the data channel's bits over the receiver's core
	// time (its threads' and its NAPI thread's) while they were sent:
	// what one core of the receiver takes (isolated only). The sending
	// peer shares the other CPU with everything else and sets the
	// throughput; this is the receive path's figure.
	MbpsPerCore        float64 `json:"data_channel_mbps_per_core,omitempty"`
	RTPLatencyP50Ns    float64 `json:"rtp_latency_p50_ns"`
	RTPLatencyP99Ns    float64 `json:"rtp_latency_p99_ns"`
	RTPPacketsReceived int     `json:"rtp_packets_received"`
	// ViaKernel: datagrams of the AF_XDP conn that took its kernel socket.
	ViaKernel uint64 `json:"via_kernel,omitempty"`
}

// probeResult is what `ebrtc rx-probe` prints when it ends.
type probeResult struct {
	Latencies  []uint32 `json:"latencies_ns"` // latency trial: from the sender's stamp
	Receive    []uint32 `json:"receive_ns"`   // latency trial: from the arrival stamp
	Ping       []uint32 `json:"ping_ns"`      // ping trial: from the arrival stamp
	Batch      int      `json:"batch"`        // datagrams a read at most (0: one at a time)
	Sent       int      `json:"-"`            // a paced blast's datagrams (the generator's count)
	CoreNs     uint64   `json:"-"`            // the receiver's core over the blast: its threads' and its NAPI thread's run time
	BlastCPUNs uint64   `json:"blast_cpu_ns"` // the probe's CPU time over the blast (to its last 1,024th datagram)
	Blast      uint64   `json:"blast"`        // throughput trial datagrams
	BlastNs    uint64   `json:"blast_ns"`     // from its first to its last
	ViaKernel  uint64   `json:"via_kernel"`
	Mode       string   `json:"mode"`
	// SocketDrops: frames the AF_XDP sockets' kernel counters say were
	// dropped (rx_dropped, rx_ring_full, rx_fill_ring_empty_descs).
	SocketDrops uint64 `json:"socket_drops"`
}

// Flows tell the trials apart in the generator's header.
const (
	latencyFlow = 1
	blastFlow   = 2
)

// RXProbe is `ebrtc rx-probe`: it listens on addr with the receive path rx
// ("kernel" or "afxdp"); sends itself ping datagrams one at a time from a
// socket in the namespace pingFrom (if pings > 0) and reads each; prints
// "ready", and records every datagram the generator sends until SIGTERM,
// then prints "result" and its JSON. With batch > 0 it reads up to batch
// datagrams a call (AF_XDP's ReadBatch, the kernel socket's recvmmsg)
// after the pings.
func RXProbe(rx, addr, pingFrom string, pings, batch int, out io.Writer) error {
	var read func(b []byte) (n int, arrival uint64, err error)
	var readBatch func(ms []probeMsg) (int, error)
	var conn io.Closer
	var xc *afxdp.Conn
	switch rx {
	case "afxdp":
		lc := afxdp.ListenConfig{Control: testbed.LargeBuffers}
		c, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			return err
		}
		conn, xc = c, c
		read = func(b []byte) (int, uint64, error) {
			n, _, arrival, err := c.ReadWithArrival(b)
			return n, arrival, err
		}
		readBatch = afxdpBatches(c, batch)
	case "kernel":
		c, err := kernelProbeConn(addr)
		if err != nil {
			return err
		}
		conn = c
		read = kernelArrivals(c)
		readBatch = kernelBatches(c, batch)
	default:
		return fmt.Errorf("rx-probe: rx %q (want kernel or afxdp)", rx)
	}
	if batch <= 0 {
		readBatch = func(ms []probeMsg) (int, error) {
			var err error
			ms[0].n, ms[0].arrival, err = read(ms[0].buf)
			return 1, err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	res := probeResult{Latencies: make([]uint32, 0, 1<<20), Receive: make([]uint32, 0, 1<<20), Batch: batch}
	go func() {
		<-ctx.Done()
		if xc != nil {
			st, _ := xc.Stats()
			res.ViaKernel, res.Mode = st.ViaKernel, st.Mode
			res.SocketDrops = st.Sockets.RxDropped + st.Sockets.RxRingFull + st.Sockets.FillRingEmpty
		}
		conn.Close()
	}()
	if pings > 0 {
		var err error
		if res.Ping, err = ping(read, addr, pingFrom, pings); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	ms := make([]probeMsg, max(batch, 1))
	for i := range ms {
		ms[i].buf = make([]byte, 2048)
	}
	var first, last uint64
	var cpuFirst time.Duration
	for {
		k, err := readBatch(ms)
		now := monotonicNs()
		if err != nil {
			break
		}
		for _, m := range ms[:k] {
			buf := m.buf[:m.n]
			if m.n < headerLen || binary.BigEndian.Uint32(buf[20:]) != magic {
				continue
			}
			switch binary.BigEndian.Uint32(buf[16:]) {
			case latencyFlow:
				res.Latencies = append(res.Latencies, clampNs(now-binary.BigEndian.Uint64(buf[8:])))
				if m.arrival != 0 {
					res.Receive = append(res.Receive, clampNs(now-m.arrival))
				}
			case blastFlow:
				if res.Blast == 0 {
					first, cpuFirst = now, processCPU()
				}
				res.Blast, last = res.Blast+1, now
				if res.Blast%1024 == 0 {
					res.BlastCPUNs = uint64(processCPU() - cpuFirst)
				}
			}
		}
	}
	res.BlastNs = last - first
	b, err := json.Marshal(&res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "result %s\n", b)
	return err
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// probeMsg is one datagram the probe read: its buffer, length, and arrival
// (CLOCK_MONOTONIC ns; 0 where not known).
type probeMsg struct {
	buf     []byte
	n       int
	arrival uint64
}

// afxdpBatches reads c with ReadBatch, batch datagrams at most a call.
func afxdpBatches(c *afxdp.Conn, batch int) func([]probeMsg) (int, error) {
	xms := make([]afxdp.Message, max(batch, 1))
	return func(ms []probeMsg) (int, error) {
		for i := range xms {
			xms[i].Buf = ms[i].buf
		}
		k, err := c.ReadBatch(xms)
		if err != nil {
			return 0, err
		}
		for i, m := range xms[:k] {
			ms[i].n, ms[i].arrival = m.N, m.Arrival
		}
		return k, nil
	}
}

// kernelBatches reads c with recvmmsg (ipv4.PacketConn.ReadBatch), batch
// datagrams at most a call, without arrival stamps.
func kernelBatches(c *net.UDPConn, batch int) func([]probeMsg) (int, error) {
	pc := ipv4.NewPacketConn(c)
	ims := make([]ipv4.Message, max(batch, 1))
	return func(ms []probeMsg) (int, error) {
		for i := range ims {
			ims[i].Buffers = [][]byte{ms[i].buf}
		}
		k, err := pc.ReadBatch(ims, 0)
		if err != nil {
			return 0, err
		}
		for i, m := range ims[:k] {
			ms[i].n, ms[i].arrival = m.N, 0
		}
		return k, nil
	}
}

func clampNs(ns uint64) uint32 { return uint32(min(ns, 1<<32-1)) }

// ping sends n datagrams to addr from a socket in the namespace from, one
// at a time, reading each before the next, and returns their receive
// times (arrival to read). With the receiving interface's NAPI in softirq
// on this CPU, sendto delivers the datagram before it returns: the read
// finds it waiting, and the time is the receive path's own work, without
// a wakeup.
func ping(read func([]byte) (int, uint64, error), addr, from string, n int) ([]uint32, error) {
	to, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	var s *net.UDPConn
	if err := (&netns.NS{Name: from}).Do(func() (err error) {
		s, err = net.ListenUDP("udp4", &net.UDPAddr{IP: testbed.ClientIP4.AsSlice()})
		return err
	}); err != nil {
		return nil, fmt.Errorf("ping socket: %w", err)
	}
	defer s.Close()
	out := make([]uint32, 0, n)
	payload, buf := make([]byte, 1200), make([]byte, 2048)
	for range n {
		if _, err := s.WriteToUDPAddrPort(payload, to); err != nil {
			return nil, err
		}
		if _, arrival, err := read(buf); err != nil {
			return nil, err
		} else if arrival != 0 {
			out = append(out, clampNs(monotonicNs()-arrival))
		}
	}
	return out, nil
}

// kernelProbeConn is a UDP socket that has the kernel stamp each datagram
// as the stack takes it (SO_TIMESTAMPNS: right after the interface's XDP
// hook, where the classifier stamps AF_XDP's frames).
func kernelProbeConn(addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
		return errors.Join(err, serr, testbed.LargeBuffers(network, address, c))
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// kernelArrivals reads c with each datagram's kernel timestamp, moved
// from CLOCK_REALTIME to CLOCK_MONOTONIC (the generator's and the
// classifier's clock) by an offset read once.
func kernelArrivals(c *net.UDPConn) func(b []byte) (int, uint64, error) {
	offset := realtimeOffset()
	oob := make([]byte, 128)
	return func(b []byte) (int, uint64, error) {
		n, oobn, _, _, err := c.ReadMsgUDPAddrPort(b, oob)
		if err != nil {
			return 0, 0, err
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
				ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				return n, uint64(ts.Nano() - offset), nil
			}
		}
		return n, 0, nil
	}
}

// realtimeOffset is CLOCK_REALTIME minus CLOCK_MONOTONIC, from the
// closest of a few back-to-back readings.
func realtimeOffset() int64 {
	best, offset := int64(1<<62), int64(0)
	for range 16 {
		var a, r, z unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &z)
		if d := z.Nano() - a.Nano(); d < best {
			best, offset = d, r.Nano()-(a.Nano()+d/2)
		}
	}
	return offset
}

// RunAFXDP measures both receive paths on the testbed: the receiver (a
// probe process in the server namespace) on its own core with its
// interface's NAPI thread when isolated, the generator elsewhere.
func RunAFXDP(ctx context.Context, bin string, o AFXDPOptions) (*AFXDPReport, error) {
	start := time.Now()
	e, closeEnv, err := newEnv(ctx, bin, o.Log, o.Isolate, nil)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	rep := &AFXDPReport{Machine: machineFacts(), Isolated: o.Isolate, Size: o.Size, Rate: o.Rate}
	if rep.Receivers, err = compareReceivers(e, o); err != nil {
		return nil, err
	}
	rep.MedianRatio = MedianRatio(rep.Receivers, func(r ReceiverResult) float64 { return r.ReceiveP50Ns })
	rep.WakeupMedianRatio = MedianRatio(rep.Receivers, func(r ReceiverResult) float64 { return r.WakeupReceiveP50Ns })
	if rep.AtKernelRate, err = blastAtKernelRate(e, o, rep.Receivers[1].PPS); err != nil {
		return nil, err
	}
	if rep.Pion, err = comparePion(e, o); err != nil {
		return nil, err
	}
	rep.PionRatio = rep.Pion[0].DataChannelMbps / rep.Pion[1].DataChannelMbps
	if k := rep.Pion[1].MbpsPerCore; k > 0 {
		rep.PionCoreRatio = rep.Pion[0].MbpsPerCore / k
	}
	if rep.Senders, err = compareSenders(e, o); err != nil {
		return nil, err
	}
	if x, k := rep.sender("afxdp").CoreNsPerDatagram, rep.sender("sendmmsg").CoreNsPerDatagram; x > 0 {
		rep.TXCoreRatio = k / x
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// cpuPerDatagram is the probe's CPU time a blast datagram (its own: the
// interface's NAPI thread beside it is not counted).
func cpuPerDatagram(r *probeResult) string {
	if r.Blast < 1024 {
		return "-"
	}
	return fmt.Sprintf("%.2f µs", float64(r.BlastCPUNs)/float64(r.Blast/1024*1024)/1000)
}

// PacedBlast is a blast paced at a given rate into the AF_XDP receiver
// (one datagram a read): how much of it took the kernel socket.
type PacedBlast struct {
	Rate      float64 `json:"rate"` // datagrams/s
	Sent      int     `json:"sent"`
	Received  uint64  `json:"received"`
	ViaKernel uint64  `json:"via_kernel"`
}

// blastAtKernelRate sends o.Rounds blasts at rate (the kernel socket's
// blast rate) to the AF_XDP receiver reading one datagram at a time: the
// fill ring's sizing and refilling keep up with it, or datagrams take
// the kernel socket.
func blastAtKernelRate(e *env, o AFXDPOptions, rate float64) (PacedBlast, error) {
	out := PacedBlast{Rate: rate}
	for round := range o.Rounds {
		res, err := probeTrial(e, "afxdp", o, trialSpec{blastRate: rate})
		if err != nil {
			return out, fmt.Errorf("afxdp receiver, blast at %.0f/s: %w", rate, err)
		}
		progress(Options{Progress: o.Progress}, "afxdp: blast %d/%d at the kernel socket's %.0f/s: %d of %d received, %d via the kernel socket, %d dropped by the AF_XDP socket",
			round+1, o.Rounds, rate, res.Blast, res.Sent, res.ViaKernel, res.SocketDrops)
		out.Sent += res.Sent
		out.Received += res.Blast
		out.ViaKernel += res.ViaKernel
	}
	return out, nil
}

// comparePion runs o.Rounds pion trials of each receive path, in turns
// (kernel first), and keeps each path's medians: afxdp, then kernel.
func comparePion(e *env, o AFXDPOptions) ([]PionResult, error) {
	rounds := map[string][]PionResult{}
	for round := range o.Rounds {
		for _, rx := range []string{"kernel", "afxdp"} {
			p, err := pionTrial(e, rx, o)
			if err != nil {
				return nil, fmt.Errorf("pion, %s receiver: %w", rx, err)
			}
			progress(Options{Progress: o.Progress}, "afxdp: pion round %d/%d, %s receiver: data channel %.0f Mbit/s (%.0f a receiver core), RTP one-way p50 %.1f µs, %d via the kernel socket, receiver's core %.0f%% busy",
				round+1, o.Rounds, rx, p.DataChannelMbps, p.MbpsPerCore, p.RTPLatencyP50Ns/1000, p.ViaKernel, 100*p.ReceiverCore)
			rounds[rx] = append(rounds[rx], p)
		}
	}
	var out []PionResult
	for _, rx := range []string{"afxdp", "kernel"} {
		rs := rounds[rx]
		med := func(f func(PionResult) float64) float64 {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			return quantile(v, 0.5)
		}
		m := PionResult{Name: rx, Rounds: len(rs),
			DataChannelMbps: med(func(r PionResult) float64 { return r.DataChannelMbps }),
			ReceiverCore:    med(func(r PionResult) float64 { return r.ReceiverCore }),
			MbpsPerCore:     med(func(r PionResult) float64 { return r.MbpsPerCore }),
			RTPLatencyP50Ns: med(func(r PionResult) float64 { return r.RTPLatencyP50Ns }),
			RTPLatencyP99Ns: med(func(r PionResult) float64 { return r.RTPLatencyP99Ns })}
		for _, r := range rs {
			m.DataChannelBytes += r.DataChannelBytes
			m.RTPPacketsReceived += r.RTPPacketsReceived
			m.ViaKernel += r.ViaKernel
		}
		out = append(out, m)
	}
	return out, nil
}

// CompareReceivers runs o.Rounds latency and blast trials of each receive
// path on tb (not isolated): for the demo.
func CompareReceivers(ctx context.Context, tb *testbed.Testbed, bin string, o AFXDPOptions) ([]ReceiverResult, error) {
	return compareReceivers(&env{ctx: ctx, tb: tb, ebrtc: bin, log: io.Discard}, o)
}

// MedianRatio is AF_XDP's figure over the kernel socket's, of = a median
// of ReceiverResult (0 without both).
func MedianRatio(rs []ReceiverResult, of func(ReceiverResult) float64) float64 {
	var x, k float64
	for _, r := range rs {
		switch r.Name {
		case "afxdp":
			x = of(r)
		case "kernel":
			k = of(r)
		}
	}
	if k == 0 {
		return 0
	}
	return x / k
}

// compareReceivers alternates the receivers, round by round, and pools
// each one's samples.
func compareReceivers(e *env, o AFXDPOptions) ([]ReceiverResult, error) {
	type pooled struct {
		ReceiverResult
		paced, oneWay, pings []uint32
		blasts, batchBlasts  []float64
		coreNs, batchCoreNs  uint64
	}
	names := []string{"afxdp", "kernel"}
	all := map[string]*pooled{}
	for _, rx := range names {
		all[rx] = &pooled{ReceiverResult: ReceiverResult{Name: rx}}
	}
	for round := range o.Rounds {
		for _, rx := range []string{"kernel", "afxdp"} {
			progress(Options{Progress: o.Progress}, "afxdp: round %d/%d, %s receiver", round+1, o.Rounds, rx)
			res, err := probeTrial(e, rx, o, trialSpec{latency: true})
			if err != nil {
				return nil, fmt.Errorf("%s receiver: %w", rx, err)
			}
			batch, err := probeTrial(e, rx, o, trialSpec{batch: probeBatch})
			if err != nil {
				return nil, fmt.Errorf("%s receiver, batch reads: %w", rx, err)
			}
			progress(Options{Progress: o.Progress}, "afxdp:   %s: batch reads: blast %d in %.2f s, %d via the kernel socket, %s CPU a datagram", rx,
				batch.Blast, float64(batch.BlastNs)/1e9, batch.ViaKernel, cpuPerDatagram(batch))
			progress(Options{Progress: o.Progress}, "afxdp:   %s: receive p50 %.1f µs (ping), %.1f µs (paced, %d datagrams); blast %d in %.2f s, %s CPU a datagram", rx,
				quantile(res.Ping, 0.5)/1000, quantile(res.Receive, 0.5)/1000, len(res.Receive), res.Blast, float64(res.BlastNs)/1e9, cpuPerDatagram(res))
			p := all[rx]
			p.paced = append(p.paced, res.Receive...)
			p.pings = append(p.pings, res.Ping...)
			p.oneWay = append(p.oneWay, res.Latencies...)
			p.Lost += uint64(max(o.Packets-len(res.Latencies), 0))
			p.ViaKernel += res.ViaKernel
			p.Mode = res.Mode
			if res.BlastNs > 0 {
				p.blasts = append(p.blasts, float64(res.Blast-1)/(float64(res.BlastNs)/1e9))
			}
			if batch.BlastNs > 0 {
				p.batchBlasts = append(p.batchBlasts, float64(batch.Blast-1)/(float64(batch.BlastNs)/1e9))
			}
			p.Blasted += res.Blast
			p.BatchBlasted += batch.Blast
			p.coreNs += res.CoreNs
			p.batchCoreNs += batch.CoreNs
			p.BatchViaKernel += batch.ViaKernel
		}
	}
	var out []ReceiverResult
	for _, rx := range names {
		p := all[rx]
		p.Samples = len(p.paced)
		p.ReceiveP50Ns, p.ReceiveP99Ns = quantile(p.pings, 0.5), quantile(p.pings, 0.99)
		p.WakeupReceiveP50Ns, p.WakeupReceiveP99Ns = quantile(p.paced, 0.5), quantile(p.paced, 0.99)
		p.OneWayP50Ns, p.OneWayP99Ns = quantile(p.oneWay, 0.5), quantile(p.oneWay, 0.99)
		p.PPS, p.BatchPPS = quantile(p.blasts, 0.5), quantile(p.batchBlasts, 0.5)
		if p.Blasted > 0 && p.BatchBlasted > 0 {
			p.CoreNsPerDatagram = float64(p.coreNs) / float64(p.Blasted)
			p.BatchCoreNsPerDatagram = float64(p.batchCoreNs) / float64(p.BatchBlasted)
		}
		out = append(out, p.ReceiverResult)
	}
	return out, nil
}

// probeBatch: datagrams a batch read takes at most (a generator's
// sendmmsg batch).
const probeBatch = 64

// trialSpec is what a probe trial measures: with latency, pings and a
// paced latency trial before the blast; the blast read batch datagrams a
// call (0: one at a time), sent at blastRate datagrams/s (0: as fast as
// the generator goes).
type trialSpec struct {
	latency   bool
	batch     int
	blastRate float64
}

// probeTrial runs one probe: pings and a paced latency trial (if
// asked), then a blast.
func probeTrial(e *env, rx string, o AFXDPOptions, spec trialSpec) (*probeResult, error) {
	out := &testbed.LineBuffer{}
	addr := netip.AddrPortFrom(testbed.ServerClientIP4, 5004)
	pings := 0
	if spec.latency {
		pings = o.Pings
	}
	cmd := []string{e.ebrtc, "rx-probe", "--rx", rx, "--listen", addr.String(), "--ping-from", e.tb.Client.Name, "--ping", strconv.Itoa(pings),
		"--batch", strconv.Itoa(spec.batch)}
	// The pings need the interface's NAPI in softirq (on the prober's CPU);
	// the paced and blast trials have it in its thread again.
	if e.core != nil {
		if err := setThreaded(e.tb.Server, testbed.ServerCliIface, false); err != nil {
			return nil, err
		}
	}
	if e.core != nil {
		// Pinned from the start, as a deployment pins it (taskset, a
		// cpuset): Go then sizes GOMAXPROCS to the one CPU.
		cmd = append([]string{"taskset", "-c", strconv.Itoa(e.core.cpu)}, cmd...)
	}
	p, err := testbed.Start(e.tb.Server, io.MultiWriter(out, e.log), cmd[0], cmd[1:]...)
	if err != nil {
		return nil, err
	}
	defer p.Stop(5 * time.Second)
	if err := out.Wait("ready", 30*time.Second, p); err != nil {
		return nil, err
	}
	var core relayTasks // the receiver's and its interface's NAPI thread (isolated)
	if e.core != nil {
		if err := setThreaded(e.tb.Server, testbed.ServerCliIface, true); err != nil {
			return nil, err
		}
		if core, err = e.core.pin([]int{p.Pid()}); err != nil {
			return nil, err
		}
	}
	conn, err := testbed.ListenUDP(e.tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	send := func(flow uint32, count int, rate float64, d time.Duration) error {
		dir := &direction{send: ipv4.NewPacketConn(conn), dst: net.UDPAddrFromAddrPort(addr), flow: flow}
		stop := make(chan struct{})
		timer := time.AfterFunc(d, func() { close(stop) })
		defer timer.Stop()
		return dir.run(count, rate, o.Size, stop)
	}
	// Warm up (ARP, the probe's first wakeups), then measure.
	if err := send(0, 100, 1000, time.Second); err != nil {
		return nil, err
	}
	if spec.latency {
		if err := send(latencyFlow, o.Packets, o.Rate, time.Duration(float64(o.Packets)/o.Rate*1.5*float64(time.Second))+time.Second); err != nil {
			return nil, err
		}
	}
	time.Sleep(200 * time.Millisecond)
	count, rate, d := 1<<30, 1e9, o.Blast
	if spec.blastRate > 0 { // o.Blast's worth, given time to finish
		count, rate, d = int(spec.blastRate*o.Blast.Seconds()), spec.blastRate, o.Blast+time.Second
	}
	before, _ := runTime(core.tids())
	if err := send(blastFlow, count, rate, d); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond)
	after, _ := runTime(core.tids())
	if err := p.Stop(10 * time.Second); err != nil {
		return nil, fmt.Errorf("probe: %w\n%s", err, out.String())
	}
	line, ok := out.Find("result ")
	if !ok {
		return nil, fmt.Errorf("probe printed no result:\n%s", out.String())
	}
	var res probeResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return nil, err
	}
	if spec.blastRate > 0 {
		res.Sent = count
	}
	if e.core != nil && after > before {
		res.CoreNs = after - before
	}
	return &res, nil
}

// WriteTable prints the report.
func (rep *AFXDPReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "AF_XDP receive path (%s, %d CPUs, %s; %d-byte datagrams at %.0f/s)\n", rep.Machine.Kernel, rep.Machine.CPUs,
		map[bool]string{true: "receiver on its own core", false: "not isolated"}[rep.Isolated], rep.Size, rep.Rate)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "receiver\treceive p50 µs\tp99 µs\twith wakeup p50 µs\tp99 µs\tone-way p50 µs\tp99 µs\tpps (blast)\tvia kernel\tcore µs\tbatch pps\tvia kernel\tcore µs\tlost\tmode\t")
	for _, r := range rep.Receivers {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t%.2f\t%.0f\t%s\t%.2f\t%d\t%s\t\n", r.Name, r.ReceiveP50Ns/1000, r.ReceiveP99Ns/1000,
			r.WakeupReceiveP50Ns/1000, r.WakeupReceiveP99Ns/1000, r.OneWayP50Ns/1000, r.OneWayP99Ns/1000,
			r.PPS, share(r.ViaKernel, r.Blasted), r.CoreNsPerDatagram/1000, r.BatchPPS, share(r.BatchViaKernel, r.BatchBlasted), r.BatchCoreNsPerDatagram/1000, r.Lost, r.Mode)
	}
	tw.Flush()
	met := func(ok bool) string { return map[bool]string{true: "met", false: "MISSED"}[ok] }
	fmt.Fprintf(w, "  median receive time afxdp/kernel %.2f (target at most 0.80: %s); with a wakeup %.2f\n", rep.MedianRatio,
		met(rep.MedianRatio > 0 && rep.MedianRatio <= 0.8), rep.WakeupMedianRatio)
	if len(rep.Receivers) == 2 && rep.Receivers[1].PPS > 0 && rep.Receivers[1].BatchPPS > 0 {
		x, k := rep.Receivers[0], rep.Receivers[1]
		fmt.Fprintf(w, "  blast afxdp/kernel %.2f, %s via the kernel socket (target at least 2 with under 0.1%%: %s)\n", x.PPS/k.PPS,
			share(x.ViaKernel, x.Blasted), met(x.PPS >= 2*k.PPS && 1000*x.ViaKernel < x.Blasted))
		fmt.Fprintf(w, "  batch reads afxdp/kernel (recvmmsg) %.2f", x.BatchPPS/k.BatchPPS)
		if x.BatchCoreNsPerDatagram > 0 {
			perCore := k.BatchCoreNsPerDatagram / x.BatchCoreNsPerDatagram
			fmt.Fprintf(w, "; per core (core µs a datagram) %.2f: %.0f and %.0f datagrams/s a core (target at least 3: %s)", perCore,
				1e9/x.BatchCoreNsPerDatagram, 1e9/k.BatchCoreNsPerDatagram, met(perCore >= 3))
		}
		fmt.Fprintln(w)
	}
	if b := rep.AtKernelRate; b.Sent > 0 {
		fmt.Fprintf(w, "  blast at the kernel socket's %.0f/s into afxdp: %d of %d received, %s via the kernel socket (target under 0.1%%: %s)\n",
			b.Rate, b.Received, b.Sent, share(b.ViaKernel, b.Received), met(1000*b.ViaKernel < b.Received))
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pion receiver\tdata channel Mbit/s\ta receiver core\tcore busy\tRTP one-way p50 µs\tp99 µs\tRTP received\tvia kernel\trounds\t")
	for _, p := range rep.Pion {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f%%\t%.1f\t%.1f\t%d\t%d\t%d\t\n", p.Name, p.DataChannelMbps, p.MbpsPerCore, 100*p.ReceiverCore,
			p.RTPLatencyP50Ns/1000, p.RTPLatencyP99Ns/1000, p.RTPPacketsReceived, p.ViaKernel, p.Rounds)
	}
	tw.Flush()
	fmt.Fprintf(w, "  pion data channel afxdp/kernel %.2f, a receiver core %.2f (medians; target at least 1.00: %s, %s)\n", rep.PionRatio, rep.PionCoreRatio,
		met(rep.PionRatio >= 1), met(rep.PionCoreRatio >= 1))
	rep.writeSenders(w)
	fmt.Fprintf(w, "elapsed %v\n", rep.Elapsed.Round(time.Second))
}

// share is part of whole as a percentage.
func share(part, whole uint64) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(part)/float64(whole))
}

// WriteJSON writes the report.
func (rep *AFXDPReport) WriteJSON(path string) error { return writeJSON(path, rep) }

// WritePlot draws receive-time bars.
func (rep *AFXDPReport) WritePlot(path string) error {
	var names []string
	var p50, p99 []float64
	for _, r := range rep.Receivers {
		names = append(names, r.Name)
		p50, p99 = append(p50, r.ReceiveP50Ns/1000), append(p99, r.ReceiveP99Ns/1000)
	}
	left, err := barPlot("receive time p50", "µs", names, plotter.Values(p50))
	if err != nil {
		return err
	}
	right, err := barPlot("receive time p99", "µs", names, plotter.Values(p99))
	if err != nil {
		return err
	}
	return savePair(left, right, path)
}
