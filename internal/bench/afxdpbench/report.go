package afxdpbench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/ebrtc/ebrtc/internal/bench"
)

// Report is the result of a run.
type Report struct {
	Machine   bench.Machine    `json:"machine"`
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

// PacedBlast is a blast paced at a given rate into the AF_XDP receiver
// (one datagram a read): how much of it took the kernel socket.
type PacedBlast struct {
	Rate      float64 `json:"rate"` // datagrams/s
	Sent      int     `json:"sent"`
	Received  uint64  `json:"received"`
	ViaKernel uint64  `json:"via_kernel"`
}

// WriteTable prints the report.
func (rep *Report) WriteTable(w io.Writer) {
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
func (rep *Report) WriteJSON(path string) error { return bench.WriteJSON(path, rep) }

// WritePlot draws receive-time bars.
func (rep *Report) WritePlot(path string) error {
	var names []string
	var p50, p99 []float64
	for _, r := range rep.Receivers {
		names = append(names, r.Name)
		p50, p99 = append(p50, r.ReceiveP50Ns/1000), append(p99, r.ReceiveP99Ns/1000)
	}
	left, err := bench.BarPlot("receive time p50", "µs", names, plotter.Values(p50))
	if err != nil {
		return err
	}
	right, err := bench.BarPlot("receive time p99", "µs", names, plotter.Values(p99))
	if err != nil {
		return err
	}
	return bench.SavePair(left, right, path)
}
