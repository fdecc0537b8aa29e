// Package afxdpbench is `ebrtc bench --afxdp`: a WebRTC endpoint's receive
// path through AF_XDP (pkg/afxdp) against a kernel UDP socket (receive
// time, blasts one at a time and in batches, the receiver's core time), a
// pion/webrtc peer over each, and the transmit paths (AF_XDP's TX ring,
// sendmmsg, UDP GSO); `ebrtc rx-probe` and `ebrtc tx-probe` are its
// receiver and sender processes.
package afxdpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// Options configure `ebrtc bench --afxdp`: the receive path of a
// WebRTC endpoint, through AF_XDP (pkg/afxdp) and through a kernel socket,
// measured side by side.
type Options struct {
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

// QuickOptions run in well under a minute.
func QuickOptions() Options {
	return Options{Size: 1200, Rate: 10000, Packets: 10000, Blast: 500 * time.Millisecond, Rounds: 4, Pings: 5000, PionBytes: 16 << 20, PionPackets: 1000}
}

// FullOptions measure longer.
func FullOptions() Options {
	return Options{Size: 1200, Rate: 10000, Packets: 50000, Blast: 3 * time.Second, Rounds: 4, Pings: 20000, PionBytes: 64 << 20, PionPackets: 5000}
}

// Run measures both receive paths on the testbed: the receiver (a
// probe process in the server namespace) on its own core with its
// interface's NAPI thread when isolated, the generator elsewhere.
func Run(ctx context.Context, bin string, o Options) (*Report, error) {
	start := time.Now()
	e, closeEnv, err := bench.NewEnv(ctx, bin, o.Log, o.Isolate, nil)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	rep := &Report{Machine: bench.MachineFacts(), Isolated: o.Isolate, Size: o.Size, Rate: o.Rate}
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

// blastAtKernelRate sends o.Rounds blasts at rate (the kernel socket's
// blast rate) to the AF_XDP receiver reading one datagram at a time: the
// fill ring's sizing and refilling keep up with it, or datagrams take
// the kernel socket.
func blastAtKernelRate(e *bench.Env, o Options, rate float64) (PacedBlast, error) {
	out := PacedBlast{Rate: rate}
	for round := range o.Rounds {
		res, err := probeTrial(e, "afxdp", o, trialSpec{blastRate: rate})
		if err != nil {
			return out, fmt.Errorf("afxdp receiver, blast at %.0f/s: %w", rate, err)
		}
		bench.Progressf(o.Progress, "afxdp: blast %d/%d at the kernel socket's %.0f/s: %d of %d received, %d via the kernel socket, %d dropped by the AF_XDP socket",
			round+1, o.Rounds, rate, res.Blast, res.Sent, res.ViaKernel, res.SocketDrops)
		out.Sent += res.Sent
		out.Received += res.Blast
		out.ViaKernel += res.ViaKernel
	}
	return out, nil
}

// comparePion runs o.Rounds pion trials of each receive path, in turns
// (kernel first), and keeps each path's medians: afxdp, then kernel.
func comparePion(e *bench.Env, o Options) ([]PionResult, error) {
	rounds := map[string][]PionResult{}
	for round := range o.Rounds {
		for _, rx := range []string{"kernel", "afxdp"} {
			p, err := pionTrial(e, rx, o)
			if err != nil {
				return nil, fmt.Errorf("pion, %s receiver: %w", rx, err)
			}
			bench.Progressf(o.Progress, "afxdp: pion round %d/%d, %s receiver: data channel %.0f Mbit/s (%.0f a receiver core), RTP one-way p50 %.1f µs, %d via the kernel socket, receiver's core %.0f%% busy",
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
			return bench.Quantile(v, 0.5)
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
func CompareReceivers(ctx context.Context, tb *testbed.Testbed, bin string, o Options) ([]ReceiverResult, error) {
	return compareReceivers(bench.OnTestbed(ctx, tb, bin), o)
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
func compareReceivers(e *bench.Env, o Options) ([]ReceiverResult, error) {
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
			bench.Progressf(o.Progress, "afxdp: round %d/%d, %s receiver", round+1, o.Rounds, rx)
			res, err := probeTrial(e, rx, o, trialSpec{latency: true})
			if err != nil {
				return nil, fmt.Errorf("%s receiver: %w", rx, err)
			}
			batch, err := probeTrial(e, rx, o, trialSpec{batch: probeBatch})
			if err != nil {
				return nil, fmt.Errorf("%s receiver, batch reads: %w", rx, err)
			}
			bench.Progressf(o.Progress, "afxdp:   %s: batch reads: blast %d in %.2f s, %d via the kernel socket, %s CPU a datagram", rx,
				batch.Blast, float64(batch.BlastNs)/1e9, batch.ViaKernel, cpuPerDatagram(batch))
			bench.Progressf(o.Progress, "afxdp:   %s: receive p50 %.1f µs (ping), %.1f µs (paced, %d datagrams); blast %d in %.2f s, %s CPU a datagram", rx,
				bench.Quantile(res.Ping, 0.5)/1000, bench.Quantile(res.Receive, 0.5)/1000, len(res.Receive), res.Blast, float64(res.BlastNs)/1e9, cpuPerDatagram(res))
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
		p.ReceiveP50Ns, p.ReceiveP99Ns = bench.Quantile(p.pings, 0.5), bench.Quantile(p.pings, 0.99)
		p.WakeupReceiveP50Ns, p.WakeupReceiveP99Ns = bench.Quantile(p.paced, 0.5), bench.Quantile(p.paced, 0.99)
		p.OneWayP50Ns, p.OneWayP99Ns = bench.Quantile(p.oneWay, 0.5), bench.Quantile(p.oneWay, 0.99)
		p.PPS, p.BatchPPS = bench.Quantile(p.blasts, 0.5), bench.Quantile(p.batchBlasts, 0.5)
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
func probeTrial(e *bench.Env, rx string, o Options, spec trialSpec) (*probeResult, error) {
	out := &testbed.LineBuffer{}
	addr := netip.AddrPortFrom(testbed.ServerClientIP4, 5004)
	pings := 0
	if spec.latency {
		pings = o.Pings
	}
	cmd := []string{e.Bin, "rx-probe", "--rx", rx, "--listen", addr.String(), "--ping-from", e.Testbed.Client.Name, "--ping", strconv.Itoa(pings),
		"--batch", strconv.Itoa(spec.batch)}
	// The pings need the interface's NAPI in softirq (on the prober's CPU);
	// the paced and blast trials have it in its thread again.
	if e.Isolated() {
		if err := bench.SetThreadedNAPI(e.Testbed.Server, testbed.ServerCliIface, false); err != nil {
			return nil, err
		}
	}
	if e.Isolated() {
		// Pinned from the start, as a deployment pins it (taskset, a
		// cpuset): Go then sizes GOMAXPROCS to the one CPU.
		cmd = append([]string{"taskset", "-c", strconv.Itoa(e.CoreCPU())}, cmd...)
	}
	p, err := testbed.Start(e.Testbed.Server, io.MultiWriter(out, e.Log), cmd[0], cmd[1:]...)
	if err != nil {
		return nil, err
	}
	defer p.Stop(5 * time.Second)
	if err := out.Wait("ready", 30*time.Second, p); err != nil {
		return nil, err
	}
	var core bench.Tasks // the receiver's and its interface's NAPI thread (isolated)
	if e.Isolated() {
		if err := bench.SetThreadedNAPI(e.Testbed.Server, testbed.ServerCliIface, true); err != nil {
			return nil, err
		}
		if core, err = e.Pin(p.Pid()); err != nil {
			return nil, err
		}
	}
	conn, err := testbed.ListenUDP(e.Testbed.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	send := func(flow uint32, count int, rate float64, d time.Duration) error {
		dir := &bench.Direction{Send: ipv4.NewPacketConn(conn), Dst: net.UDPAddrFromAddrPort(addr), Flow: flow}
		stop := make(chan struct{})
		timer := time.AfterFunc(d, func() { close(stop) })
		defer timer.Stop()
		return dir.Run(count, rate, o.Size, stop)
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
	before, _ := core.RunTime()
	if err := send(blastFlow, count, rate, d); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond)
	after, _ := core.RunTime()
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
	if e.Isolated() && after > before {
		res.CoreNs = after - before
	}
	return &res, nil
}
