// Package turnbench is `ebrtc bench`: an RFC 2544-style benchmark of TURN
// relays on the namespace testbed. All relays are measured in one run so ratios
// between them are fair: ebrtc with the XDP fast path, ebrtc in user space
// with one and N sockets, coturn, and plain kernel forwarding as the baseline.
package turnbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
)

// Options of a run.
type Options struct {
	Relays    []string      // names from Relays(); empty: all
	Clients   int           // TURN clients, each with a channel to its own peer
	Sizes     []int         // payload sizes; 0 means the mix (alternating 200 and 1200 per flow)
	Trial     time.Duration // length of one search trial
	MaxLoss   float64       // loss allowed at the loss-free rate (RFC 2544 style), e.g. 0.001
	CostRate  float64       // datagrams/s at which every relay's latency and CPU cost are measured
	StartRate float64       // first rate tried by the search
	MaxRate   float64       // highest rate tried
	Steps     int           // search trials at most
	// Isolate runs the relay under test, all of its kernel work included,
	// alone on the last CPU and the generator on the others (bench.NewEnv),
	// and reports the relay core's time per packet.
	Isolate  bool
	Progress io.Writer // progress lines (nil: none)
	Log      io.Writer // relay output (nil: discarded)
}

// MinSize is the smallest payload size: the generator's header.
const MinSize = bench.MinSize

// QuickOptions finish in under 3 minutes for all relays.
func QuickOptions() Options {
	return Options{Clients: 8, Sizes: []int{200}, Trial: time.Second, MaxLoss: 0.001,
		CostRate: 50000, StartRate: 40000, MaxRate: 3_200_000, Steps: 8}
}

// FullOptions finish in under 15 minutes for all relays.
func FullOptions() Options {
	return Options{Clients: 8, Sizes: []int{200, 1200, 0}, Trial: 3 * time.Second, MaxLoss: 0.001,
		CostRate: 50000, StartRate: 40000, MaxRate: 3_200_000, Steps: 10}
}

// Run measures the selected relays with bin as the ebrtc binary. Cancelling
// ctx stops it between trials; it returns after removing what it built.
func Run(ctx context.Context, bin string, o Options) (*Report, error) {
	relays, err := selectRelays(o.Relays)
	if err != nil {
		return nil, err
	}
	be, closeEnv, err := bench.NewEnv(ctx, bin, o.Log, o.Isolate, nil)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	e := &env{Env: be}
	tb := e.Testbed
	rep := &Report{Machine: bench.MachineFacts(), Options: o, Started: time.Now(), Isolated: o.Isolate,
		Namespaces: []string{tb.Client.Name, tb.Server.Name, tb.Peer.Name}}
	for _, r := range relays {
		res, err := measureRelay(e, r, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		rep.Relays = append(rep.Relays, *res)
	}
	rep.Elapsed = time.Since(rep.Started)
	rep.compare()
	return rep, nil
}

// env is a run's environment, and the processes the relay under test
// started (its start function records them, to pin them).
type env struct {
	*bench.Env
	started []int
}

func selectRelays(names []string) ([]Relay, error) {
	return bench.Select("relay", Relays(), names, func(r Relay) string { return r.Name }, relayIs,
		"ebrtc-xdp, ebrtc-tc, ebrtc-user-1, ebrtc-user-N, coturn, coturn+ebrtc-offload, baseline")
}

// relayIs reports whether a relay's name is the one asked for; "ebrtc-user-N"
// names the multi-socket variant whatever N is on this machine.
func relayIs(name, asked string) bool {
	return name == asked || (asked == "ebrtc-user-N" && strings.HasPrefix(name, "ebrtc-user-") && name != "ebrtc-user-1")
}

func measureRelay(e *env, r Relay, o Options) (*RelayResult, error) {
	bench.Progressf(o.Progress, "%-14s starting", r.Name)
	e.started = nil
	stop, err := r.start(e)
	if err != nil {
		return nil, err
	}
	defer stop()
	flows, err := setupFlows(e.Testbed, r, o.Clients)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range flows {
			f.close()
		}
	}()
	// Warm up: channels bound, neighbours resolved, fast path entries in place.
	dirs, sizes := directions(flows, sizesFor(200, len(flows)))
	if _, err := bench.RunTrial(e.Testbed, dirs, sizes, 2000, 300*time.Millisecond); err != nil {
		return nil, err
	}
	if err := e.PinRelay(e.started...); err != nil {
		return nil, err
	}
	res := &RelayResult{Name: r.Name, Describe: r.Describe}
	for _, size := range o.Sizes {
		sr, err := search(e, r.Name, flows, size, o)
		if err != nil {
			return nil, err
		}
		res.Sizes = append(res.Sizes, *sr)
	}
	if err := e.Ctx.Err(); err != nil {
		return nil, err
	}
	bench.Progressf(o.Progress, "%-14s latency and cost trial at %.0f/s", r.Name, o.CostRate)
	if err := costTrial(e, flows, o, res); err != nil {
		return nil, err
	}
	res.fillHeadline()
	if e.Isolated() {
		bench.Progressf(o.Progress, "%-14s saturation trial: in-kernel generator, 200-byte data", r.Name)
		sat, err := saturate(e, flows, 200, max(o.Trial, 2*time.Second))
		if err != nil {
			return nil, err
		}
		res.fillSaturated(sat)
		bench.Progressf(o.Progress, "%-14s saturated: %.0f pkt/s delivered (%.1f%% lost), core %.0f%% busy, %.0f ns/packet",
			r.Name, res.SaturatedPPS, 100*res.SaturatedLoss, 100*res.SaturatedCoreBusy, res.SaturatedCoreNsPerPacket)
	}
	if e.Isolated() {
		bench.Progressf(o.Progress, "%-14s relay core: %.0f ns/packet at %.0f/s, %.0f at the max loss-free rate; %.0f ns/packet of the core's busy time not the relay's",
			r.Name, res.RelayCoreNsPerPacket, o.CostRate, res.RelayCoreNsAtMax, res.StrayNsPerPacket)
	}
	bench.Progressf(o.Progress, "%-14s done: %.0f pkt/s loss-free, p50 %.0f µs, p99 %.0f µs, %.0f ns CPU/packet",
		r.Name, res.MaxLossFreePPS, res.LatencyP50us, res.LatencyP99us, res.CPUNsPerPacket)
	return res, nil
}

// sizesFor gives each flow its payload size; 0 is the mix.
func sizesFor(size, flows int) []int {
	out := make([]int, flows)
	for i := range out {
		out[i] = size
		if size == 0 {
			out[i] = []int{200, 1200}[i%2]
		}
	}
	return out
}

// directions are the flows' directions, both ways each, and their sizes.
func directions(flows []*flow, sizes []int) ([]*bench.Direction, []int) {
	var dirs []*bench.Direction
	var dirSizes []int
	for i, f := range flows {
		dirs = append(dirs, f.fwd, f.rev)
		dirSizes = append(dirSizes, sizes[i], sizes[i])
	}
	return dirs, dirSizes
}

// trial runs one trial of the socket generator over every flow, both ways,
// each flow's datagrams of its size (accounted on the relay core).
func (e *env) trial(flows []*flow, rate float64, d time.Duration, sizes []int) (*bench.TrialResult, error) {
	dirs, dirSizes := directions(flows, sizes)
	return e.Trial(dirs, dirSizes, rate, d)
}

// search finds the highest offered rate (datagrams/s, both directions
// together) with loss at most MaxLoss: doubling until a trial fails, then
// bisecting (RFC 2544 section 26.1).
func search(e *env, name string, flows []*flow, size int, o Options) (*SizeResult, error) {
	sizes := sizesFor(size, len(flows))
	var best *bench.TrialResult
	generatorShort := false
	err := bench.RateSearch(e.Ctx, o.StartRate, o.MaxRate, o.Steps, func(rate float64) (bool, bool, error) {
		t, err := e.trial(flows, rate, o.Trial, sizes)
		if err != nil {
			return false, false, err
		}
		pass := t.Loss() <= o.MaxLoss && t.SentFraction() >= 0.95
		bench.Progressf(o.Progress, "%-14s size %-4s %8.0f/s: loss %.3f%% (%d in the generator's sockets) sent %.0f%% %s", name, sizeName(size), rate,
			100*t.Loss(), t.EndpointDrops, 100*t.SentFraction(), map[bool]string{true: "pass", false: "fail"}[pass])
		if pass {
			best = t
		} else {
			generatorShort = t.SentFraction() < 0.95
		}
		return pass, false, nil
	})
	if err != nil {
		return nil, err
	}
	sr := &SizeResult{Size: sizeName(size)}
	if best != nil {
		sr.fill(best)
	}
	sr.GeneratorLimited = generatorShort
	return sr, nil
}

func sizeName(size int) string {
	if size == 0 {
		return "mix"
	}
	return fmt.Sprint(size)
}

// costTrial measures, at one rate every relay sustains, the latency and the
// system-wide CPU time per relayed datagram, so relays compare like for like.
func costTrial(e *env, flows []*flow, o Options, res *RelayResult) error {
	before, err := readCPU()
	if err != nil {
		return err
	}
	t, err := e.trial(flows, o.CostRate, max(o.Trial, 3*time.Second), sizesFor(200, len(flows)))
	if err != nil {
		return err
	}
	after, err := readCPU()
	if err != nil {
		return err
	}
	if t.Received == 0 {
		return errors.New("cost trial: nothing delivered")
	}
	res.CPUNsPerPacket = float64(after.busy-before.busy) / float64(t.Received)
	if e.Isolated() {
		res.RelayCoreNsPerPacket = float64(t.RelayNs) / float64(t.Received)
		res.StrayNsPerPacket = float64(t.StrayNs) / float64(t.Received)
	}
	res.CPUResolutionNs = float64(2*runtime.NumCPU()) * 1e7 / float64(t.Received)
	res.CostLoss = t.Loss()
	res.LatencyP50us, res.LatencyP99us = t.Latency.Quantile(0.5), t.Latency.Quantile(0.99)
	res.LatencyMaxUs, res.JitterUs = t.Latency.MaxUs(), t.JitterUs
	res.cdfX, res.cdfY = t.Latency.CDF()
	return nil
}
