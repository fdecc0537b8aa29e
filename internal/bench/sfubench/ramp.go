package sfubench

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// ramp adds a meeting of o.MeetingSize participants per step, each
// publishing the captured stream at its pace and receiving the others,
// until the sampled receivers' p99 jitter or the loss passes its limit.
// One participant per meeting reads its sockets (jitter, and its share of
// the loss); the others' replicas are counted and dropped at the client's
// veth, so that the generator's CPU goes to sending.
func ramp(e *env, rec *synth.Recording, o Options, res *SFUResult, sut *sfuUnderTest) error {
	lt, err := bench.NewLiveTraffic(e.Testbed)
	if err != nil {
		return err
	}
	defer lt.Close()
	if e.Isolated() {
		restore, err := e.PrioritizeFarNAPI()
		if err != nil {
			return err
		}
		defer restore()
	}
	ctx, stop := context.WithCancel(e.Ctx)
	var meetings []*meeting
	var sending sync.WaitGroup
	defer func() { // the senders first, then the participants
		stop()
		sending.Wait()
		for _, m := range meetings {
			m.leave()
		}
	}()
	res.RampEnded = "max"
	for n := o.MeetingSize; n <= o.RampMax; n += o.MeetingSize {
		k := len(meetings)
		cfg := sut.config(e, k, fmt.Sprintf("ramp-%d", k))
		m, err := startMeeting(ctx, e, func(int) synth.Config { return cfg }, func(int) int { return k }, rec, o, k, lt, &sending)
		if err != nil {
			return err
		}
		meetings = append(meetings, m)
		time.Sleep(500 * time.Millisecond) // key frames in, gates open
		// A step that fails is measured once more with the same meetings:
		// a hiccup of this shared machine (a vCPU stalled for tens of ms
		// overflows a veth ring) passes, a limit fails again.
		var ended string
		for try := 0; try < 2; try++ {
			var where lossPoints
			if o.Log != nil { // a dozen processes on the generator's CPU: only when asked
				where = lossSnapshot(e, sut)
			}
			step, err := rampStep(e, lt, meetings, o, sut)
			if err != nil {
				return err
			}
			if o.Log != nil {
				fmt.Fprintf(e.Log, "%s ramp %d: lost on the way: %v\n", res.Name, n, lossSnapshot(e, sut).since(where))
			}
			step.Participants, step.Retry = n, try > 0
			res.Ramp = append(res.Ramp, step)
			progress(o, "%-15s ramp %4d participants%s: jitter p99 %5.1f ms, loss %.3f%%, relay core %3.0f%% busy, %d late sends",
				res.Name, n, map[bool]string{true: " (again)", false: ""}[step.Retry], step.JitterP99ms, 100*step.Loss,
				100*step.RelayCoreBusy, step.LateSends)
			if ended = rampVerdict(step, o); ended == "" {
				res.ParticipantsPerCore = n
				if step.RelayCoreBusy > 0 {
					res.ParticipantsPerCoreProjected = float64(n) / step.RelayCoreBusy
				}
				break
			}
		}
		if ended != "" {
			res.RampEnded = ended
			break
		}
	}
	return nil
}

// lossPoints are counters of where datagrams can be lost on the testbed:
// the veths' drops, the hosts' full socket buffers, ebrtc sfu's outcomes.
type lossPoints map[string]float64

func lossSnapshot(e *env, sut *sfuUnderTest) lossPoints {
	p := lossPoints{}
	for k, v := range bench.LinkDrops(e.Testbed) {
		p["drops "+k] = float64(v)
	}
	for i, ns := range e.hosts {
		p[fmt.Sprintf("rcvbuf errors host %d", i)] = float64(bench.UDPRcvbufErrors(ns))
	}
	if sut.metrics != nil {
		if m, err := sut.metrics(); err == nil {
			for k, v := range sfuOutcomes(m) {
				p["sfu "+k] = v
			}
		}
	}
	return p
}

// since is what grew since before.
func (p lossPoints) since(before lossPoints) lossPoints {
	out := lossPoints{}
	for k, v := range p {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// rampVerdict is why a step ends the ramp, or "". A generator behind is
// blamed first, unless the SFU's core was saturated: then the SFU's
// jitter or loss is.
func rampVerdict(step RampStep, o Options) string {
	jitter := step.JitterP99ms > float64(o.RampJitter.Milliseconds())
	loss := step.Loss > o.RampLoss
	switch {
	case step.RelayCoreBusy >= 0.95 && jitter:
		return "jitter"
	case step.RelayCoreBusy >= 0.95 && loss:
		return "loss"
	case step.LateShare > o.RampLoss: // single late packets are hiccups, not the generator's limit
		return "generator"
	case jitter:
		return "jitter"
	case loss:
		return "loss"
	}
	return ""
}

// startMeeting joins one meeting's participants (participant i as
// cfgOf(i) says, on host hostOf(i)), each publishing virtual sender
// index*MeetingSize+i, and starts their streams.
func startMeeting(ctx context.Context, e *env, cfgOf func(i int) synth.Config, hostOf func(i int) int, rec *synth.Recording, o Options,
	index int, lt *bench.LiveTraffic, sending *sync.WaitGroup) (*meeting, error) {
	m := &meeting{}
	for i := range o.MeetingSize {
		p, err := synth.Join(cfgOf(i))
		if err != nil {
			m.leave()
			return nil, err
		}
		m.parts = append(m.parts, p)
		if err := p.Publish(rec.NewStream(uint32(1 + index*o.MeetingSize + i))); err != nil {
			m.leave()
			return nil, err
		}
	}
	if err := synth.AwaitStreams(m.parts, o.MeetingSize-1, 30*time.Second); err != nil {
		m.leave()
		return nil, err
	}
	// All but the first participant's replicas: counted at the veth.
	ports := map[netip.AddrPort]uint16{}
	for i, p := range m.parts[1:] {
		for _, in := range p.Incoming() {
			ports[netip.AddrPortFrom(e.hostIP(hostOf(i+1)), in.Port())] = 0xffff // any length counts one
		}
	}
	if err := lt.Sink(ports); err != nil {
		m.leave()
		return nil, err
	}
	for _, p := range m.parts {
		sending.Add(1)
		go func() {
			defer sending.Done()
			_, _ = p.Send(ctx, 0, 1<<30, cmp.Or(o.MeetingPace, 1))
		}()
	}
	return m, nil
}

// rampSent is what the ramp's publishers sent: packets, times their
// receivers, and how many packets late.
func rampSent(meetings []*meeting) (packets, replicas, late uint64) {
	for _, m := range meetings {
		for _, p := range m.parts {
			sent, l := p.Sent()
			packets += sent
			replicas += sent * uint64(len(m.parts)-1)
			late += l
		}
	}
	return packets, replicas, late
}

// rampDelivered is what reached the receivers: the sampled ones' sockets
// and the far end's sink.
func rampDelivered(lt *bench.LiveTraffic, meetings []*meeting) (uint64, error) {
	n, err := lt.Sunk()
	for _, m := range meetings {
		for _, in := range m.parts[0].Incoming() {
			per, _, _ := in.Stats()
			for _, st := range per {
				n += uint64(st.Packets)
			}
		}
	}
	return n, err
}

// rampStep measures one step. What was sent and what was delivered are
// read back to back at both ends of the step: what is in flight at its end
// (a millisecond's worth) is missing as at its start, alike. (Reading the
// delivered counts later than the sent ones would compare two different
// windows of a rate that varies with the capture's frames and key frames.)
func rampStep(e *env, lt *bench.LiveTraffic, meetings []*meeting, o Options, sut *sfuUnderTest) (RampStep, error) {
	var core0, core1 bench.CoreSample
	dropped0, err := sut.layersDropped()
	if err != nil {
		return RampStep{}, err
	}
	packets0, sent0, late0 := rampSent(meetings)
	got0, err := rampDelivered(lt, meetings)
	if err != nil {
		return RampStep{}, err
	}
	start := time.Now()
	if e.Isolated() {
		if core0, err = e.SampleCore(); err != nil {
			return RampStep{}, err
		}
	}
	time.Sleep(o.RampStep)
	packets1, sent1, late1 := rampSent(meetings)
	got1, err := rampDelivered(lt, meetings)
	if err != nil {
		return RampStep{}, err
	}
	dropped1, err := sut.layersDropped()
	if err != nil {
		return RampStep{}, err
	}
	elapsed := time.Since(start)
	if e.Isolated() {
		if core1, err = e.SampleCore(); err != nil {
			return RampStep{}, err
		}
	}
	var jitters []float64
	for _, m := range meetings {
		for _, in := range m.parts[0].Incoming() {
			per, _, _ := in.Stats()
			for _, st := range per {
				jitters = append(jitters, float64(st.Jitter.Microseconds())/1000)
			}
		}
	}
	step := RampStep{JitterP99ms: bench.Quantile(jitters, 0.99), LateSends: late1 - late0}
	if packets1 > packets0 {
		step.LateShare = float64(step.LateSends) / float64(packets1-packets0)
	}
	// Layers dropped on purpose (rate adaptation) are not owed.
	if want := sent1 - sent0 - min(dropped1-dropped0, sent1-sent0); want > 0 {
		step.Loss = max(0, 1-float64(got1-got0)/float64(want))
	}
	if e.Isolated() {
		step.RelayCoreBusy = float64(core1.RelayNsSince(core0)) / float64(elapsed.Nanoseconds())
	}
	return step, nil
}
