// Package bench is `ebrtc bench`: an RFC 2544-style benchmark of TURN relays
// on the namespace testbed. All relays are measured in one run so ratios
// between them are fair: ebrtc with the XDP fast path, ebrtc in user space
// with one and N sockets, coturn, and plain kernel forwarding as the baseline.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
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
	// alone on the last CPU and the generator on the others (relayCore),
	// and reports the relay core's time per packet.
	Isolate  bool
	Progress io.Writer // progress lines (nil: none)
	Log      io.Writer // relay output (nil: discarded)
}

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
	e, closeEnv, err := newEnv(ctx, bin, o.Log, o.Isolate, nil)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	tb := e.tb
	rep := &Report{Machine: machineFacts(), Options: o, Started: time.Now(), Isolated: o.Isolate,
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

// newEnv builds what a run needs: the testbed, a work directory, and with
// isolate the relay core, after prepare (if any) has added to the testbed
// what the core must know of. The function returned removes all of it.
func newEnv(ctx context.Context, bin string, log io.Writer, isolate bool, prepare func(*env) error) (*env, func(), error) {
	if log == nil {
		log = io.Discard
	}
	tb, err := testbed.New()
	if err != nil {
		return nil, nil, fmt.Errorf("testbed: %w", err)
	}
	e := &env{ctx: ctx, tb: tb, ebrtc: bin, log: log}
	closeEnv := func() {
		if e.core != nil {
			e.core.release()
		}
		if e.workDir != "" {
			os.RemoveAll(e.workDir)
		}
		tb.Close()
	}
	if e.workDir, err = os.MkdirTemp("", "ebrtc-bench"); err == nil && prepare != nil {
		err = prepare(e)
	}
	if err == nil && isolate {
		if e.core, err = newRelayCore(tb); err != nil {
			err = fmt.Errorf("isolate: %w", err)
		}
	}
	if err != nil {
		closeEnv()
		return nil, nil, err
	}
	return e, closeEnv, nil
}

func selectRelays(names []string) ([]Relay, error) {
	return selectNamed("relay", Relays(), names, func(r Relay) string { return r.Name }, relayIs,
		"ebrtc-xdp, ebrtc-tc, ebrtc-user-1, ebrtc-user-N, coturn, coturn+ebrtc-offload, baseline")
}

// selectNamed picks from all, in the order asked, what is asks for by
// name; none, or "all", picks everything.
func selectNamed[T any](kind string, all []T, names []string, name func(T) string, is func(name, asked string) bool, have string) ([]T, error) {
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return all, nil
	}
	var out []T
	for _, n := range names {
		found := false
		for _, x := range all {
			if is(name(x), n) {
				out, found = append(out, x), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown %s %q (have %s)", kind, n, have)
		}
	}
	return out, nil
}

// relayIs reports whether a relay's name is the one asked for; "ebrtc-user-N"
// names the multi-socket variant whatever N is on this machine.
func relayIs(name, asked string) bool {
	return name == asked || (asked == "ebrtc-user-N" && strings.HasPrefix(name, "ebrtc-user-") && name != "ebrtc-user-1")
}

func measureRelay(e *env, r Relay, o Options) (*RelayResult, error) {
	progress(o, "%-14s starting", r.Name)
	e.started = nil
	stop, err := r.start(e)
	if err != nil {
		return nil, err
	}
	defer stop()
	flows, err := setupFlows(e.tb, r, o.Clients)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range flows {
			f.close()
		}
	}()
	// Warm up: channels bound, neighbours resolved, fast path entries in place.
	if _, err := runTrial(e.tb, flows, 2000, 300*time.Millisecond, sizesFor(200, len(flows))); err != nil {
		return nil, err
	}
	if e.core != nil {
		if e.relayTasks, err = e.core.pin(e.started); err != nil {
			return nil, err
		}
	}
	res := &RelayResult{Name: r.Name, Describe: r.Describe}
	for _, size := range o.Sizes {
		sr, err := search(e, r.Name, flows, size, o)
		if err != nil {
			return nil, err
		}
		res.Sizes = append(res.Sizes, *sr)
	}
	if err := e.ctx.Err(); err != nil {
		return nil, err
	}
	progress(o, "%-14s latency and cost trial at %.0f/s", r.Name, o.CostRate)
	if err := costTrial(e, flows, o, res); err != nil {
		return nil, err
	}
	res.fillHeadline()
	if e.core != nil {
		progress(o, "%-14s saturation trial: in-kernel generator, 200-byte data", r.Name)
		sat, err := saturate(e, flows, 200, max(o.Trial, 2*time.Second))
		if err != nil {
			return nil, err
		}
		res.fillSaturated(sat)
		progress(o, "%-14s saturated: %.0f pkt/s delivered (%.1f%% lost), core %.0f%% busy, %.0f ns/packet",
			r.Name, res.SaturatedPPS, 100*res.SaturatedLoss, 100*res.SaturatedCoreBusy, res.SaturatedCoreNsPerPacket)
	}
	if e.core != nil {
		progress(o, "%-14s relay core: %.0f ns/packet at %.0f/s, %.0f at the max loss-free rate; %.0f ns/packet of the core's busy time not the relay's",
			r.Name, res.RelayCoreNsPerPacket, o.CostRate, res.RelayCoreNsAtMax, res.StrayNsPerPacket)
	}
	progress(o, "%-14s done: %.0f pkt/s loss-free, p50 %.0f µs, p99 %.0f µs, %.0f ns CPU/packet",
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

// search finds the highest offered rate (datagrams/s, both directions
// together) with loss at most MaxLoss: doubling until a trial fails, then
// bisecting (RFC 2544 section 26.1).
func search(e *env, name string, flows []*flow, size int, o Options) (*SizeResult, error) {
	sizes := sizesFor(size, len(flows))
	var best *trialResult
	generatorShort := false
	err := rateSearch(e.ctx, o.StartRate, o.MaxRate, o.Steps, func(rate float64) (bool, bool, error) {
		t, err := e.trial(flows, rate, o.Trial, sizes)
		if err != nil {
			return false, false, err
		}
		pass := t.loss() <= o.MaxLoss && t.sentFraction() >= 0.95
		progress(o, "%-14s size %-4s %8.0f/s: loss %.3f%% (%d in the generator's sockets) sent %.0f%% %s", name, sizeName(size), rate,
			100*t.loss(), t.endpointDrops, 100*t.sentFraction(), map[bool]string{true: "pass", false: "fail"}[pass])
		if pass {
			best = t
		} else {
			generatorShort = t.sentFraction() < 0.95
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

// rateSearch runs trial at rates doubling from start (up to maxRate) until
// one fails, then bisects between the highest pass and the lowest failure
// until they are within 5%, for at most steps trials. trial says whether
// the rate passed, and whether to stop there (the sender fell short).
func rateSearch(ctx context.Context, start, maxRate float64, steps int, trial func(rate float64) (pass, stop bool, err error)) error {
	lo, hi := 0.0, 0.0 // highest passing, lowest failing (0: none yet)
	rate := start
	for range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		pass, stop, err := trial(rate)
		if err != nil || stop {
			return err
		}
		if pass {
			lo = rate
		} else {
			hi = rate
		}
		if hi == 0 {
			if lo == maxRate {
				return nil
			}
			rate = min(2*rate, maxRate)
			continue
		}
		if hi-lo <= 0.05*max(lo, 1) {
			return nil
		}
		rate = (lo + hi) / 2
	}
	return nil
}

func sizeName(size int) string {
	if size == 0 {
		return "mix"
	}
	return fmt.Sprint(size)
}

// trial is runTrial, with the relay core's time read around it when the
// relay is isolated.
func (e *env) trial(flows []*flow, rate float64, d time.Duration, sizes []int) (*trialResult, error) {
	if e.core == nil {
		return runTrial(e.tb, flows, rate, d, sizes)
	}
	before, err := e.core.sample(e.relayTasks)
	if err != nil {
		return nil, err
	}
	t, err := runTrial(e.tb, flows, rate, d, sizes)
	if err != nil {
		return nil, err
	}
	after, err := e.core.sample(e.relayTasks)
	if err != nil {
		return nil, err
	}
	t.relayNs = after.relayNsSince(before)
	t.strayNs = strayNs(before, after)
	return t, nil
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
	if t.received == 0 {
		return errors.New("cost trial: nothing delivered")
	}
	res.CPUNsPerPacket = float64(after.busy-before.busy) / float64(t.received)
	if e.core != nil {
		res.RelayCoreNsPerPacket = float64(t.relayNs) / float64(t.received)
		res.StrayNsPerPacket = float64(t.strayNs) / float64(t.received)
	}
	res.CPUResolutionNs = float64(2*runtime.NumCPU()) * 1e7 / float64(t.received)
	res.CostLoss = t.loss()
	res.LatencyP50us, res.LatencyP99us = t.hist.quantile(0.5), t.hist.quantile(0.99)
	res.LatencyMaxUs, res.JitterUs = float64(t.hist.max)/1000, t.jitterUs
	res.cdfX, res.cdfY = t.hist.cdf()
	return nil
}

type trialResult struct {
	offered        float64
	duration       time.Duration
	expected       uint64
	sent, received uint64
	hist           *histogram
	jitterUs       float64
	endpointDrops  uint64 // lost in the generator's own socket buffers
	// With isolation: the relay's tasks' run time, and that of the other
	// tasks bound to the relay CPU.
	relayNs, strayNs uint64
}

func (t *trialResult) loss() float64 {
	if t.sent == 0 {
		return 1
	}
	return 1 - float64(t.received)/float64(t.sent)
}

func (t *trialResult) sentFraction() float64 {
	return float64(t.sent) / float64(t.expected)
}

// runTrial offers rate datagrams/s in total, split evenly over every flow
// and direction, for d; then drains and counts.
func runTrial(tb *testbed.Testbed, flows []*flow, rate float64, d time.Duration, sizes []int) (*trialResult, error) {
	dropsBefore := endpointDrops(tb)
	var dirs []*direction
	var dirSizes []int
	for i, f := range flows {
		dirs = append(dirs, f.fwd, f.rev)
		dirSizes = append(dirSizes, sizes[i], sizes[i])
	}
	perDir := rate / float64(len(dirs))
	count := int(perDir * d.Seconds())
	res := &trialResult{offered: rate, duration: d, expected: uint64(count * len(dirs)), hist: newHistogram()}
	for _, dir := range dirs {
		dir.sent.Store(0)
		dir.received.Store(0)
		dir.jitter = jitter{}
	}
	stopRecv, stopSend := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var wg, rwg sync.WaitGroup
	errs := make(chan error, 2*len(dirs))
	for _, dir := range dirs {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			if err := dir.receive(res.hist, &mu, stopRecv); err != nil {
				errs <- err
			}
		}()
	}
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dir.run(count, perDir, dirSizes[i], stopSend); err != nil {
				errs <- err
			}
		}()
	}
	// Senders that fall far behind are the generator's limit, not the relay's.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d + d/2 + time.Second):
		close(stopSend)
		<-done
	}
	time.Sleep(200 * time.Millisecond) // in flight
	close(stopRecv)
	rwg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	var jsum float64
	for _, dir := range dirs {
		res.sent += dir.sent.Load()
		res.received += dir.received.Load()
		jsum += dir.jitter.value()
	}
	res.jitterUs = jsum / float64(len(dirs)) / 1000
	res.endpointDrops = endpointDrops(tb) - dropsBefore
	return res, nil
}

func progress(o Options, format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...)
	}
}
