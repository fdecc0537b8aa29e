package agent

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// LayerPlane is what the Adapter asks of a data plane.
type LayerPlane interface {
	Layers(from netip.AddrPort) (dataplane.Layers, error)
	SetTarget(from, to netip.AddrPort, target int) error
}

// Adapter picks each receiver's decode target of each sender's video: the
// highest whose bitrate (the data plane's per-layer counters) fits the
// receiver's smoothed bandwidth estimate (its REMBs), down at once and up
// after it has fitted a while (layers.Chooser). The data plane applies a
// pick where the decoder can follow; an up-switch that waits PLIAfter for
// a switch point gets the sender asked for a key frame.
type Adapter struct {
	plane    LayerPlane
	fb       *Feedback
	pliAfter time.Duration

	mu      sync.Mutex
	senders map[netip.AddrPort]*adaptedSender
}

type adaptedSender struct {
	rates    layers.Rates
	choosers map[netip.AddrPort]*layers.Chooser
}

// NewAdapter adapts through plane, from fb's estimates; pliAfter 0: 500 ms.
func NewAdapter(plane LayerPlane, fb *Feedback, pliAfter time.Duration) *Adapter {
	if pliAfter == 0 {
		pliAfter = 500 * time.Millisecond
	}
	return &Adapter{plane: plane, fb: fb, pliAfter: pliAfter, senders: map[netip.AddrPort]*adaptedSender{}}
}

// Adapt runs one round for the sender's video (SSRC videoSSRC, feedback
// leaving by via); call it a few times a second.
func (a *Adapter) Adapt(now time.Time, sender, via netip.AddrPort, videoSSRC uint32) error {
	ls, err := a.plane.Layers(sender)
	if err != nil || ls.Targets == 0 {
		return err
	}
	a.mu.Lock()
	s := a.senders[sender]
	if s == nil {
		s = &adaptedSender{choosers: map[netip.AddrPort]*layers.Chooser{}}
		a.senders[sender] = s
	}
	s.rates.Observe(now, ls.Bytes)
	rates := s.rates.Bitrates(now)
	var targets []int
	keyFrame := false
	seen := map[netip.AddrPort]bool{}
	for _, r := range ls.Receivers {
		seen[r.To] = true
		target := -1 // every layer, until the receiver says what fits
		if est, ok := a.fb.Estimate(sender, r.To); ok && rates[len(rates)-1] > 0 {
			c := s.choosers[r.To]
			if c == nil {
				c = &layers.Chooser{}
				s.choosers[r.To] = c
			}
			if t := c.Choose(now, est, rates); t < ls.Targets-1 {
				target = t
			}
		}
		targets = append(targets, target)
		keyFrame = keyFrame || r.SwitchWaiting >= a.pliAfter
	}
	for to := range s.choosers {
		if !seen[to] {
			delete(s.choosers, to)
		}
	}
	a.mu.Unlock()
	for i, r := range ls.Receivers {
		if targets[i] != r.Target {
			if err := a.plane.SetTarget(sender, r.To, targets[i]); err != nil {
				return err
			}
		}
	}
	if keyFrame {
		return a.fb.RequestKeyFrame(sender, via, videoSSRC)
	}
	return nil
}

// Forget drops what was kept about a sender.
func (a *Adapter) Forget(sender netip.AddrPort) {
	a.mu.Lock()
	delete(a.senders, sender)
	a.mu.Unlock()
}
