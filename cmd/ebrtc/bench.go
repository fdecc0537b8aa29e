package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench/afxdpbench"
	"github.com/ebrtc/ebrtc/internal/bench/sfubench"
	"github.com/ebrtc/ebrtc/internal/bench/turnbench"
	sfudataplane "github.com/ebrtc/ebrtc/internal/sfu/dataplane"
)

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", stderr)
	relays := fs.String("relays", "all", "comma-separated: ebrtc-xdp, ebrtc-tc, ebrtc-user-1, ebrtc-user-N, coturn, coturn+ebrtc-offload, baseline, or all")
	quick := fs.Bool("quick", false, "one size, 1 s trials: under 3 minutes for all relays")
	clients := fs.Int("clients", 0, "TURN clients (default 8)")
	sizes := fs.String("sizes", "", "payload sizes, comma-separated, 'mix' for 200/1200 alternating (default: 200 with --quick, else 200,1200,mix)")
	jsonPath := fs.String("json", "", "write the results as JSON to this file")
	plotPath := fs.String("plot", "", "write a PNG chart (throughput bars, latency CDF) to this file")
	maxLoss := fs.Float64("max-loss", 0, "loss allowed at the loss-free rate, in percent (default 0.1)")
	verbose := fs.Bool("v", false, "show the relays' output")
	sfu := fs.Bool("sfu", false, "benchmark SFUs (ebrtc sfu, both data planes, and Janus) instead of TURN relays")
	afxdp := fs.Bool("afxdp", false, "benchmark the AF_XDP receive path (pkg/afxdp) against a kernel UDP socket, and pion peers over each, instead of TURN relays")
	rate := fs.Float64("rate", 0, "with --afxdp, datagrams/s of the latency trials (default 10000)")
	sfus := fs.String("sfus", "all", "with --sfu, comma-separated: ebrtc-sfu-ebpf, ebrtc-sfu-user, ebrtc-sfu-ebpf-plain, ebrtc-sfu-user-plain, ebrtc-sfu-ebpf-ra, ebrtc-sfu-user-ra, janus, ebrtc-sfu-user-encrypted, janus-encrypted, room (a large meeting with and without last-N), or all")
	room := fs.Int("room", 0, "with --sfu, participants of the room measured with and without --last-n (default 50)")
	lastN := fs.Int("last-n", 0, "with --sfu, the room's last-N (default 4)")
	hosts := fs.Int("hosts", 0, "with --sfu, client namespaces (each behind a veth of its own) the receivers spread over (default 4, at most 8)")
	fanout := fs.Int("fanout", 0, fmt.Sprintf("with --sfu, receivers of the replication trials' sender (default 50, at most %d)", sfudataplane.MaxFanout))
	isolate := fs.Bool("isolate", runtime.NumCPU() >= 2, "run the relay under test, with its interfaces' NAPI threads, alone on the last CPU and report its core's time per packet")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc bench [flags]\n\nMeasures TURN relays on a namespace testbed (needs root): the highest loss-free\nrate (RFC 2544 search), latency, jitter and CPU per packet, all in one run.\nWith --sfu, ebrtc sfu's two data planes and Janus instead: cost per replica, loss-free\nreplicas/s, replica skew and participants per core (docs/sfu.md). With --afxdp, an\nendpoint's receive time through AF_XDP and through a kernel socket (docs/afxdp.md).\n\nFlags:")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc bench: %v\n", err)
		return 1
	}
	if *afxdp {
		o := afxdpbench.FullOptions()
		if *quick {
			o = afxdpbench.QuickOptions()
		}
		o.Isolate, o.Progress = *isolate, stderr
		if *rate != 0 {
			if *rate < 100 || *rate > 1e6 {
				fmt.Fprintln(stderr, "ebrtc bench: --rate must be 100-1000000")
				return 2
			}
			o.Rate = *rate
		}
		if *verbose {
			o.Log = stderr
		}
		return runReport(stdout, stderr, *jsonPath, *plotPath, func(ctx context.Context) (report, error) { return afxdpbench.Run(ctx, bin, o) })
	}
	if *sfu {
		o := sfubench.FullOptions()
		if *quick {
			o = sfubench.QuickOptions()
		}
		if *fanout != 0 {
			if *fanout < 2 || *fanout > sfudataplane.MaxFanout {
				fmt.Fprintf(stderr, "ebrtc bench: --fanout must be 2-%d\n", sfudataplane.MaxFanout)
				return 2
			}
			o.Fanout = *fanout
		}
		if *hosts != 0 {
			if *hosts < 1 || *hosts > 8 {
				fmt.Fprintln(stderr, "ebrtc bench: --hosts must be 1-8")
				return 2
			}
			o.Hosts = *hosts
		}
		if *room != 0 {
			if *room < 3 || *room > 100 {
				fmt.Fprintln(stderr, "ebrtc bench: --room must be 3-100")
				return 2
			}
			o.Room = *room
		}
		if *lastN != 0 {
			if *lastN < 1 || *lastN >= o.Room-1 {
				fmt.Fprintf(stderr, "ebrtc bench: --last-n must be 1-%d (under the room's other participants)\n", o.Room-2)
				return 2
			}
			o.LastN = *lastN
		}
		o.SFUs, o.Isolate, o.Progress = strings.Split(*sfus, ","), *isolate, stderr
		if *maxLoss != 0 {
			o.MaxLoss = *maxLoss / 100
		}
		if *verbose {
			o.Log = stderr
		}
		return runReport(stdout, stderr, *jsonPath, *plotPath, func(ctx context.Context) (report, error) { return sfubench.Run(ctx, bin, o) })
	}
	o := turnbench.FullOptions()
	if *quick {
		o = turnbench.QuickOptions()
	}
	o.Isolate = *isolate
	if *relays != "" {
		o.Relays = strings.Split(*relays, ",")
	}
	if *clients != 0 {
		if *clients < 1 || *clients > 64 {
			fmt.Fprintln(stderr, "ebrtc bench: --clients must be 1-64")
			return 2
		}
		o.Clients = *clients
	}
	if *sizes != "" {
		o.Sizes = nil
		for _, s := range strings.Split(*sizes, ",") {
			if s == "mix" {
				o.Sizes = append(o.Sizes, 0)
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < turnbench.MinSize || n > 1400 {
				fmt.Fprintf(stderr, "ebrtc bench: --sizes: %q is not mix or %d-1400\n", s, turnbench.MinSize)
				return 2
			}
			o.Sizes = append(o.Sizes, n)
		}
	}
	if *maxLoss != 0 {
		o.MaxLoss = *maxLoss / 100
	}
	o.Progress = stderr
	if *verbose {
		o.Log = stderr
	}
	return runReport(stdout, stderr, *jsonPath, *plotPath, func(ctx context.Context) (report, error) { return turnbench.Run(ctx, bin, o) })
}

// report is what a benchmark run prints and writes.
type report interface {
	WriteTable(io.Writer)
	WriteJSON(path string) error
	WritePlot(path string) error
}

// runReport runs a benchmark until it ends or a signal comes, then prints
// its table and writes its JSON and chart where asked.
func runReport(stdout, stderr io.Writer, jsonPath, plotPath string, run func(context.Context) (report, error)) int {
	var res struct {
		rep report
		err error
	}
	interrupted := untilSignal(stderr, func(ctx context.Context) {
		res.rep, res.err = run(ctx)
	})
	if interrupted {
		return 130
	}
	if res.err != nil {
		fmt.Fprintf(stderr, "ebrtc bench: %v\n", res.err)
		return 1
	}
	res.rep.WriteTable(stdout)
	if jsonPath != "" {
		if err := res.rep.WriteJSON(jsonPath); err != nil {
			fmt.Fprintf(stderr, "ebrtc bench: %v\n", err)
			return 1
		}
	}
	if plotPath != "" {
		if err := res.rep.WritePlot(plotPath); err != nil {
			fmt.Fprintf(stderr, "ebrtc bench: %v\n", err)
			return 1
		}
	}
	return 0
}

func runTXProbe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("tx-probe", stderr)
	tx := fs.String("tx", "sendmmsg", "transmit path: sendmmsg, gso or afxdp")
	from := fs.String("from", "", "UDP address IP:PORT to send from")
	to := fs.String("to", "", "UDP address IP:PORT to send to")
	size := fs.Int("size", 1200, "datagram payload bytes")
	d := fs.Duration("duration", time.Second, "how long to send")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if err := afxdpbench.TXProbe(*tx, *from, *to, *size, *d, stdout); err != nil {
		fmt.Fprintln(stderr, "ebrtc tx-probe:", err)
		return 1
	}
	return 0
}

func runRXProbe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("rx-probe", stderr)
	rx := fs.String("rx", "kernel", "receive path: kernel or afxdp")
	listen := fs.String("listen", "", "UDP address IP:PORT")
	pingFrom := fs.String("ping-from", "", "network namespace to send ping datagrams from")
	pings := fs.Int("ping", 0, "ping datagrams to send and read one at a time before the generator's")
	batch := fs.Int("batch", 0, "read up to this many datagrams a call (AF_XDP ReadBatch, recvmmsg) after the pings; 0: one at a time")
	offer := fs.String("pion-offer", "", "a pion peer answers the offer in this file (JSON) instead, and receives a data channel and RTP")
	pionBytes := fs.Int("pion-bytes", 0, "with --pion-offer: data channel bytes to receive")
	pionPackets := fs.Int("pion-packets", 0, "with --pion-offer: RTP packets to receive")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	run := func() error { return afxdpbench.RXProbe(*rx, *listen, *pingFrom, *pings, *batch, stdout) }
	if *offer != "" {
		run = func() error { return afxdpbench.PionReceiver(*rx, *listen, *offer, *pionBytes, *pionPackets, stdout) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(stderr, "ebrtc rx-probe:", err)
		return 1
	}
	return 0
}
