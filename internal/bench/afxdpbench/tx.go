package afxdpbench

import (
	"context"
	"encoding/binary"
	"encoding/json"
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

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// The transmit side of `ebrtc bench --afxdp`: a sender on its own core
// blasts datagrams in batches to a socket in the client namespace that
// nobody reads, through one of three paths: AF_XDP's TX ring
// (afxdp.Conn.WriteBatch), sendmmsg, and UDP GSO (one sendmsg a batch,
// UDP_SEGMENT). What arrived is counted by the client namespace's UDP
// layer (delivered and dropped for a full buffer), what it cost by the
// sender's threads' run time.

// TX paths.
var txPaths = []string{"sendmmsg", "gso", "afxdp"}

// txBatch is the datagrams a batch call sends: GSO's at most what 64 KB
// takes of o.Size.
const txBatch = 64

// SenderResult is one transmit path's blasts.
type SenderResult struct {
	Name string `json:"name"` // "afxdp", "sendmmsg" or "gso"
	// PPS: what arrived over the blasts' time (median of the rounds).
	PPS float64 `json:"pps"`
	// Sent: what the sender handed its path; Arrived: what the client
	// namespace's UDP layer took (delivered or dropped for a full buffer).
	Sent    uint64 `json:"sent"`
	Arrived uint64 `json:"arrived"`
	// CoreNsPerDatagram: the sender's threads' run time (on their own
	// core, isolated only) over what arrived.
	CoreNsPerDatagram float64 `json:"core_ns_per_datagram,omitempty"`
	// ViaKernel: AF_XDP's datagrams that went through the kernel socket.
	ViaKernel uint64 `json:"via_kernel,omitempty"`
	// ChecksumErrors the client namespace's UDP counted (want 0).
	ChecksumErrors uint64 `json:"checksum_errors"`
}

// txProbeResult is what `ebrtc tx-probe` prints.
type txProbeResult struct {
	Sent      uint64 `json:"sent"`
	Ns        uint64 `json:"ns"`
	ViaKernel uint64 `json:"via_kernel"`
}

// TXProbe is `ebrtc tx-probe`: it opens tx ("afxdp", "sendmmsg" or "gso")
// on from, sends a few datagrams to to (the next hop resolved), prints
// "ready", waits a second (the bench pins it), blasts size-byte
// datagrams in batches for d, prints "result" and its JSON, and waits for
// SIGTERM.
func TXProbe(tx, from, to string, size int, d time.Duration, out io.Writer) error {
	dst, err := netip.ParseAddrPort(to)
	if err != nil {
		return err
	}
	send, closeConn, viaKernel, err := txSender(tx, from, dst, size)
	if err != nil {
		return err
	}
	defer closeConn()
	for range 10 {
		if _, err := send(1); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1100 * time.Millisecond) // AF_XDP's path looked up again: the neighbour resolved
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintln(out, "ready")
	time.Sleep(time.Second)
	var res txProbeResult
	before := viaKernel()
	start := time.Now()
	for time.Since(start) < d {
		n, err := send(txBatch)
		if err != nil {
			return err
		}
		res.Sent += uint64(n)
	}
	res.Ns, res.ViaKernel = uint64(time.Since(start)), viaKernel()-before
	b, err := json.Marshal(&res)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "result %s\n", b)
	<-ctx.Done()
	return nil
}

// txSender opens tx on from: send(n) sends a batch of n datagrams to dst
// and returns how many went.
func txSender(tx, from string, dst netip.AddrPort, size int) (send func(n int) (int, error), closeConn func() error, viaKernel func() uint64, err error) {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	viaKernel = func() uint64 { return 0 }
	switch tx {
	case "afxdp":
		c, err := afxdp.Listen("udp4", from)
		if err != nil {
			return nil, nil, nil, err
		}
		ms := make([]afxdp.Message, txBatch)
		for i := range ms {
			ms[i] = afxdp.Message{Buf: payload, Addr: dst}
		}
		viaKernel = func() uint64 {
			st, _ := c.Stats()
			var n uint64
			for _, k := range st.Sent.ViaKernel {
				n += k
			}
			return n
		}
		return func(n int) (int, error) { return c.WriteBatch(ms[:n]) }, c.Close, viaKernel, nil
	case "sendmmsg", "gso":
		pc, err := net.ListenPacket("udp4", from)
		if err != nil {
			return nil, nil, nil, err
		}
		c := pc.(*net.UDPConn)
		if tx == "gso" {
			return gsoSender(c, dst, payload), c.Close, viaKernel, nil
		}
		batch := ipv4.NewPacketConn(c)
		to := net.UDPAddrFromAddrPort(dst)
		ms := make([]ipv4.Message, txBatch)
		for i := range ms {
			ms[i] = ipv4.Message{Buffers: [][]byte{payload}, Addr: to}
		}
		return func(n int) (int, error) { return batch.WriteBatch(ms[:n], 0) }, c.Close, viaKernel, nil
	}
	return nil, nil, nil, fmt.Errorf("tx-probe: tx %q (want sendmmsg, gso or afxdp)", tx)
}

// gsoSender sends a batch as one sendmsg of its datagrams back to back,
// cut by the kernel (UDP_SEGMENT): at most what fits 64 KB.
func gsoSender(c *net.UDPConn, dst netip.AddrPort, payload []byte) func(n int) (int, error) {
	per := min(txBatch, (65535-8-20)/len(payload))
	buf := make([]byte, 0, per*len(payload))
	for range per {
		buf = append(buf, payload...)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(len(payload)))
	to := net.UDPAddrFromAddrPort(dst)
	return func(n int) (int, error) {
		k := min(n, per)
		if _, _, err := c.WriteMsgUDP(buf[:k*len(payload)], oob, to); err != nil {
			return 0, err
		}
		return k, nil
	}
}

// compareSenders runs o.Rounds blasts of each transmit path, in turns.
func compareSenders(e *bench.Env, o Options) ([]SenderResult, error) {
	all := map[string]*SenderResult{}
	rates := map[string][]float64{}
	coreNs := map[string]uint64{}
	for _, tx := range txPaths {
		all[tx] = &SenderResult{Name: tx}
	}
	for round := range o.Rounds {
		for _, tx := range txPaths {
			r, core, arrived, csum, err := txTrial(e, tx, o)
			if err != nil {
				return nil, fmt.Errorf("%s sender: %w", tx, err)
			}
			s := all[tx]
			s.Sent += r.Sent
			s.Arrived += arrived
			s.ViaKernel += r.ViaKernel
			s.ChecksumErrors += csum
			coreNs[tx] += core
			rates[tx] = append(rates[tx], float64(arrived)/(float64(r.Ns)/1e9))
			bench.Progressf(o.Progress, "afxdp: transmit round %d/%d, %s: %d sent, %d arrived in %.2f s (%.0f/s), %d via the kernel socket, core %.2f µs a datagram",
				round+1, o.Rounds, tx, r.Sent, arrived, float64(r.Ns)/1e9, rates[tx][len(rates[tx])-1], r.ViaKernel, float64(core)/float64(max(arrived, 1))/1000)
		}
	}
	var out []SenderResult
	for _, tx := range txPaths {
		s := all[tx]
		s.PPS = bench.Quantile(rates[tx], 0.5)
		if e.Isolated() && s.Arrived > 0 {
			s.CoreNsPerDatagram = float64(coreNs[tx]) / float64(s.Arrived)
		}
		out = append(out, *s)
	}
	return out, nil
}

// txTrial runs one blast: the probe's result, its threads' run time (the
// sender's core, isolated only), what arrived and the checksum errors.
func txTrial(e *bench.Env, tx string, o Options) (res txProbeResult, coreNs, arrived, csumErrors uint64, err error) {
	sink, err := testbed.ListenUDP(e.Testbed.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return res, 0, 0, 0, err
	}
	defer sink.Close()
	to := sink.LocalAddr().(*net.UDPAddr).AddrPort()
	out := &testbed.LineBuffer{}
	cmd := []string{e.Bin, "tx-probe", "--tx", tx, "--from", netip.AddrPortFrom(testbed.ServerClientIP4, 5006).String(),
		"--to", to.String(), "--size", strconv.Itoa(o.Size), "--duration", o.Blast.String()}
	if e.Isolated() {
		cmd = append([]string{"taskset", "-c", strconv.Itoa(e.CoreCPU())}, cmd...)
	}
	p, err := testbed.Start(e.Testbed.Server, io.MultiWriter(out, e.Log), cmd[0], cmd[1:]...)
	if err != nil {
		return res, 0, 0, 0, err
	}
	defer p.Stop(5 * time.Second)
	if err := out.Wait("ready", 30*time.Second, p); err != nil {
		return res, 0, 0, 0, err
	}
	core, err := e.Pin(p.Pid()) // the probe's core (isolated only)
	if err != nil {
		return res, 0, 0, 0, err
	}
	counted := func() (uint64, uint64) {
		in, _ := bench.UDPCounter(e.Testbed.Client, "InDatagrams")
		full, _ := bench.UDPCounter(e.Testbed.Client, "RcvbufErrors")
		csum, _ := bench.UDPCounter(e.Testbed.Client, "InCsumErrors")
		return in + full, csum
	}
	drain(sink) // the probe's first datagrams
	arrivedBefore, csumBefore := counted()
	before, _ := core.RunTime()
	if err := out.Wait("result ", o.Blast+30*time.Second, p); err != nil {
		return res, 0, 0, 0, err
	}
	after, _ := core.RunTime()
	time.Sleep(100 * time.Millisecond) // the last datagrams through the client's NAPI
	drain(sink)                        // (UDP counts a datagram in InDatagrams as it is read)
	arrivedAfter, csumAfter := counted()
	line, _ := out.Find("result ")
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return res, 0, 0, 0, err
	}
	return res, after - before, arrivedAfter - arrivedBefore, csumAfter - csumBefore, nil
}

// sender is the named transmit path's result (zero if none).
func (rep *Report) sender(name string) SenderResult {
	for _, s := range rep.Senders {
		if s.Name == name {
			return s
		}
	}
	return SenderResult{}
}

// writeSenders prints the transmit paths.
func (rep *Report) writeSenders(w io.Writer) {
	if len(rep.Senders) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sender\tpps arrived\tsent\tarrived\tcore µs a datagram\tdatagrams/s a core\tvia kernel\tchecksum errors\t")
	for _, s := range rep.Senders {
		perCore := "-"
		if s.CoreNsPerDatagram > 0 {
			perCore = fmt.Sprintf("%.0f", 1e9/s.CoreNsPerDatagram)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%.2f\t%s\t%d\t%d\t\n", s.Name, s.PPS, s.Sent, s.Arrived, s.CoreNsPerDatagram/1000, perCore, s.ViaKernel, s.ChecksumErrors)
	}
	tw.Flush()
	if rep.TXCoreRatio > 0 {
		fmt.Fprintf(w, "  transmit afxdp/sendmmsg per core %.2f, afxdp/gso %.2f (core time a datagram)\n", rep.TXCoreRatio,
			rep.sender("gso").CoreNsPerDatagram/rep.sender("afxdp").CoreNsPerDatagram)
	}
}

// drain reads what waits in c.
func drain(c *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			return
		}
	}
}
