// Package demo runs `ebrtc demo`: the namespace testbed, `ebrtc turn` with
// the XDP fast path and then without it, a few pion TURN clients sending
// media-sized datagrams both ways, and a side-by-side of what happened;
// then `ebrtc sfu` with each data plane carrying a synthetic meeting; then
// an endpoint's receive path through AF_XDP and through a kernel socket.
package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/bench/afxdpbench"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// Options size the demo.
type Options struct {
	Clients int // TURN clients, each with its own peer socket
	Packets int // per client and direction
	Size    int // datagram size in bytes
	Rate    int // datagrams per second per client and direction
	// SFUPackets: RTP packets the SFU demo's publisher sends, at the
	// captured stream's pace.
	SFUPackets int
	// AFXDPPackets: datagrams per receiver and round of the AF_XDP part.
	AFXDPPackets int
}

// DefaultOptions is what `make demo` runs: audio-like streams.
var DefaultOptions = Options{Clients: 4, Packets: 20000, Size: 200, Rate: 5000, SFUPackets: 600, AFXDPPackets: 10000}

const (
	user = "demo"
	pass = "demo-password"
)

// Run executes the demo with bin as the `ebrtc` binary and writes the report
// to w. Cancelling ctx stops it between modes; it returns after cleaning up.
func Run(ctx context.Context, w io.Writer, bin string, o Options) error {
	tb, err := testbed.New()
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	defer tb.Close()
	fmt.Fprintf(w, "testbed: client ns %s, server ns %s, peer ns %s\n", tb.Client.Name, tb.Server.Name, tb.Peer.Name)

	var rows []row
	for _, mode := range []string{"xdp", "tc", "off"} {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "running ebrtc turn --offload %s: %d clients x %d datagrams of %d bytes each way at %d/s...\n", mode, o.Clients, o.Packets, o.Size, o.Rate)
		r, err := runMode(tb, bin, mode, o)
		if err != nil {
			return fmt.Errorf("offload %s: %w", mode, err)
		}
		rows = append(rows, r)
	}
	report(w, rows)

	packets := o.SFUPackets
	var sfuRows []sfuRow
	for _, plane := range []string{"ebpf", "user"} {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "running ebrtc sfu --dataplane %s: one synthetic publisher (captured Chromium Opus+AV1, %d packets at its pace) to %d synthetic receivers...\n",
			plane, packets, SFUReceivers)
		r, err := runSFU(ctx, tb, bin, plane, packets)
		if err != nil {
			return fmt.Errorf("sfu %s: %w", plane, err)
		}
		sfuRows = append(sfuRows, r)
	}
	sfuReport(w, sfuRows)
	if err := ctx.Err(); err != nil {
		return err
	}
	return runAFXDP(ctx, w, tb, bin, o)
}

// runAFXDP shows the AF_XDP receive path (pkg/afxdp) next to a kernel
// socket: the same paced datagrams to each, and a burst.
func runAFXDP(ctx context.Context, w io.Writer, tb *testbed.Testbed, bin string, o Options) error {
	bo := afxdpbench.QuickOptions()
	bo.Packets, bo.Rounds = o.AFXDPPackets, 2
	fmt.Fprintf(w, "receiving %d pings of %d bytes one at a time, %d datagrams at %.0f/s and a %v burst, with a kernel UDP socket and with an AF_XDP conn (ebrtc rx-probe), twice...\n",
		bo.Pings, bo.Size, bo.Packets, bo.Rate, bo.Blast)
	rs, err := afxdpbench.CompareReceivers(ctx, tb, bin, bo)
	if err != nil {
		return fmt.Errorf("afxdp: %w", err)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "receiver\treceive p50 µs\tp99 µs\twith wakeup p50 µs\tburst datagrams/s\tvia kernel socket\tmode\t")
	for _, r := range rs {
		mode := r.Mode
		if mode == "" {
			mode = "-"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.0f\t%d\t%s\t\n", r.Name, r.ReceiveP50Ns/1000, r.ReceiveP99Ns/1000, r.WakeupReceiveP50Ns/1000, r.PPS, r.ViaKernel, mode)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nreceive time: from the frame's arrival to ReadFrom's return, the reader ready (pings); with wakeup: paced, the reader asleep in between.\nAF_XDP's median receive time is %.2fx the kernel socket's (not isolated here: ebrtc bench --afxdp pins the receiver).\n",
		afxdpbench.MedianRatio(rs, func(r afxdpbench.ReceiverResult) float64 { return r.ReceiveP50Ns }))
	return nil
}

type row struct {
	mode              string
	fast, slow        float64
	sent, received    int
	elapsed, relayCPU time.Duration
}

func runMode(tb *testbed.Testbed, bin, mode string, o Options) (row, error) {
	r, err := tb.StartRelay(bin, append(testbed.TURNArgs(user+":"+pass), "--offload", mode)...)
	if err != nil {
		return row{}, err
	}
	defer r.Stop(5 * time.Second)

	type flow struct {
		client *testbed.TURNClient
		peer   *net.UDPConn
	}
	flows := make([]flow, o.Clients)
	for i := range flows {
		c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
			Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
			User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
		})
		if err != nil {
			return row{}, err
		}
		defer c.Close()
		p, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
		if err != nil {
			return row{}, err
		}
		defer p.Close()
		flows[i] = flow{c, p}
		// Warm up: let the client bind its channel before measuring.
		if _, err := testbed.Exchange(c.Relay, p.LocalAddr(), p, 20, o.Size); err != nil {
			return row{}, err
		}
	}

	before, err := r.Metrics()
	if err != nil {
		return row{}, err
	}
	cpuBefore, _ := r.CPUTime()
	start := time.Now()
	results := make([]testbed.Result, 2*len(flows))
	errs := make([]error, 2*len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Add(2)
		go func() {
			defer wg.Done()
			results[2*i], errs[2*i] = testbed.ExchangeAt(f.client.Relay, f.peer.LocalAddr(), f.peer, o.Packets, o.Size, o.Rate)
		}()
		go func() {
			defer wg.Done()
			results[2*i+1], errs[2*i+1] = testbed.ExchangeAt(f.peer, net.UDPAddrFromAddrPort(f.client.RelayAddr()), f.client.Relay, o.Packets, o.Size, o.Rate)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuAfter, _ := r.CPUTime()
	after, err := r.Metrics()
	if err != nil {
		return row{}, err
	}
	out := row{mode: mode, elapsed: elapsed, relayCPU: cpuAfter - cpuBefore}
	for i, res := range results {
		if errs[i] != nil {
			return row{}, errs[i]
		}
		out.sent += res.Sent
		out.received += res.Received
	}
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		out.fast += after.Packets("fast", dir) - before.Packets("fast", dir)
		out.slow += after.Packets("slow", dir) - before.Packets("slow", dir)
	}
	return out, nil
}

func report(w io.Writer, rows []row) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offload\tsent\treceived\tlost\tfast path\tslow path\tfast share\tthroughput\trelay CPU\tCPU/1k pkts\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.1f%%\t%.0f pkt/s\t%v\t%v\t\n",
			r.mode, r.sent, r.received, r.sent-r.received, r.fast, r.slow, percent(r.fast, r.fast+r.slow),
			float64(r.received)/r.elapsed.Seconds(), r.relayCPU.Round(time.Millisecond), perThousand(r.relayCPU, r.received))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nfast/slow path: packets relayed in the kernel (XDP or TC) and by user space (Prometheus ebrtc_turn_packets_total).")
	fmt.Fprintln(w, "relay CPU: user+system time of the ebrtc turn process itself; the fast path's work (XDP or TC) is kernel softirq time outside it.")
	fmt.Fprintln(w, "throughput is the paced senders' rate; the relays' limits are for a benchmark, not this demo.")
}

// percent is part of whole, in percent (0 of nothing).
func percent(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

// perThousand is a CPU time per thousand of n, rounded to the microsecond.
func perThousand(cpu time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return (cpu * 1000 / time.Duration(n)).Round(time.Microsecond)
}
