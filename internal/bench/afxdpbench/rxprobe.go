package afxdpbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

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
		now := bench.MonotonicNs()
		if err != nil {
			break
		}
		for _, m := range ms[:k] {
			h, ok := bench.ParseHeader(m.buf[:m.n])
			if !ok {
				continue
			}
			switch h.Flow {
			case latencyFlow:
				res.Latencies = append(res.Latencies, clampNs(now-h.SentNs))
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
			out = append(out, clampNs(bench.MonotonicNs()-arrival))
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
