package bench

import (
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TrialResult is what one trial of the socket generator counted.
type TrialResult struct {
	Offered        float64 // datagrams/s, every direction together
	Duration       time.Duration
	Expected       uint64 // what the rate asked for
	Sent, Received uint64
	Latency        *Histogram // one-way, of every datagram received
	JitterUs       float64    // RFC 3550, the directions' mean
	EndpointDrops  uint64     // lost in the generator's own socket buffers
	// Isolated (Env.Trial): the relay's tasks' run time, and that of the
	// other tasks bound to the relay CPU.
	RelayNs, StrayNs uint64
}

// Loss is the share of what was sent that did not arrive.
func (t *TrialResult) Loss() float64 {
	if t.Sent == 0 {
		return 1
	}
	return 1 - float64(t.Received)/float64(t.Sent)
}

// SentFraction is the share of the offered datagrams the generator sent.
func (t *TrialResult) SentFraction() float64 {
	return float64(t.Sent) / float64(t.Expected)
}

// Trial is RunTrial, with the relay core's time read around it when the
// relay is isolated.
func (e *Env) Trial(dirs []*Direction, sizes []int, rate float64, d time.Duration) (*TrialResult, error) {
	if e.core == nil {
		return RunTrial(e.Testbed, dirs, sizes, rate, d)
	}
	before, err := e.SampleCore()
	if err != nil {
		return nil, err
	}
	t, err := RunTrial(e.Testbed, dirs, sizes, rate, d)
	if err != nil {
		return nil, err
	}
	after, err := e.SampleCore()
	if err != nil {
		return nil, err
	}
	t.RelayNs = after.RelayNsSince(before)
	t.StrayNs = after.StrayNsSince(before)
	return t, nil
}

// RunTrial offers rate datagrams/s in total, split evenly over the
// directions (direction i's datagrams of sizes[i] bytes), for d; then
// drains and counts.
func RunTrial(tb *testbed.Testbed, dirs []*Direction, sizes []int, rate float64, d time.Duration) (*TrialResult, error) {
	dropsBefore := endpointDrops(tb)
	perDir := rate / float64(len(dirs))
	count := int(perDir * d.Seconds())
	res := &TrialResult{Offered: rate, Duration: d, Expected: uint64(count * len(dirs)), Latency: newHistogram()}
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
			if err := dir.receive(res.Latency, &mu, stopRecv); err != nil {
				errs <- err
			}
		}()
	}
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dir.Run(count, perDir, sizes[i], stopSend); err != nil {
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
		res.Sent += dir.sent.Load()
		res.Received += dir.received.Load()
		jsum += dir.jitter.value()
	}
	res.JitterUs = jsum / float64(len(dirs)) / 1000
	res.EndpointDrops = endpointDrops(tb) - dropsBefore
	return res, nil
}
