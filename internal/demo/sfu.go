package demo

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// SFUReceivers is how many synthetic participants receive the demo's one
// publisher.
const SFUReceivers = 20

// sfuRow is one data plane's part of the SFU demo.
type sfuRow struct {
	plane                     string
	sent, expected, received  int
	mismatched                int
	replicated, notReplicated float64 // input datagrams, by the data plane's counters
	relayCPU, elapsed         time.Duration
}

// runSFU has ebrtc sfu, with this data plane, carry one synthetic
// publisher (the captured Chromium stream) to SFUReceivers synthetic
// receivers, all joined through its signaling and ICE, every packet
// checked byte for byte.
func runSFU(ctx context.Context, tb *testbed.Testbed, bin, plane string, packets int) (sfuRow, error) {
	r, err := tb.StartRelay(bin, testbed.SFUArgs(plane)...)
	if err != nil {
		return sfuRow{}, err
	}
	defer r.Stop(5 * time.Second)
	rec, err := synth.Chromium()
	if err != nil {
		return sfuRow{}, err
	}
	cfg := synth.Config{Net: synth.NetIn(tb.Client), Server: testbed.SFUWeb.String(), Room: "demo", Token: testbed.SFUTokens("demo"), Ledger: &synth.Ledger{}}
	var parts []*synth.Participant
	defer func() {
		for _, p := range parts {
			p.Leave()
		}
	}()
	pub, err := synth.Join(cfg)
	if err != nil {
		return sfuRow{}, err
	}
	parts = append(parts, pub)
	if err := pub.Publish(rec.NewStream(0)); err != nil {
		return sfuRow{}, err
	}
	for range SFUReceivers {
		p, err := synth.Join(cfg)
		if err != nil {
			return sfuRow{}, err
		}
		parts = append(parts, p)
	}
	if err := synth.AwaitStreams(parts[1:], 1, 20*time.Second); err != nil {
		return sfuRow{}, err
	}
	before, err := r.Metrics()
	if err != nil {
		return sfuRow{}, err
	}
	cpuBefore, _ := r.CPUTime()
	start := time.Now()
	sent, err := pub.Send(ctx, 0, packets, 1)
	if err != nil {
		return sfuRow{}, err
	}
	time.Sleep(200 * time.Millisecond)
	row := sfuRow{plane: plane, sent: sent, expected: sent * SFUReceivers, elapsed: time.Since(start)}
	cpuAfter, _ := r.CPUTime()
	after, err := r.Metrics()
	if err != nil {
		return sfuRow{}, err
	}
	row.relayCPU = cpuAfter - cpuBefore
	for _, p := range parts[1:] {
		per, mismatched, _ := p.Incoming()[pub.ID].Stats()
		row.mismatched += mismatched
		for _, st := range per {
			row.received += st.Packets
		}
	}
	delta := func(o dataplane.Outcome) float64 { return after.SFUOutcome(o.String()) - before.SFUOutcome(o.String()) }
	row.replicated = delta(dataplane.Replicated)
	for _, o := range []dataplane.Outcome{dataplane.UnknownSender, dataplane.NoReceivers, dataplane.Malformed, dataplane.Segmented,
		dataplane.SourceRefused, dataplane.RewriteFailed} {
		row.notReplicated += delta(o)
	}
	return row, nil
}

func sfuReport(w io.Writer, rows []sfuRow) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sfu data plane\tsent\treplicas due\treceived\tlost\tnot as sent\treplicated by the data plane\tSFU process CPU\tCPU/1k replicas\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%v\t%v\t\n", r.plane, r.sent, r.expected, r.received, r.expected-r.received,
			r.mismatched, percent(r.replicated, r.replicated+r.notReplicated), r.relayCPU.Round(time.Millisecond),
			perThousand(r.relayCPU, r.received))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nreceived: distinct RTP packets the receivers got; not as sent: bytes differing from what the publisher sent.")
	fmt.Fprintln(w, "replicated by the data plane: input datagrams it replicated, of all joined media it saw (Prometheus ebrtc_sfu_datagrams_total).")
	fmt.Fprintln(w, "SFU process CPU: user+system time of ebrtc sfu (10 ms ticks); the eBPF data plane's work is kernel time outside it.")
}
