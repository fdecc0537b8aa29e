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

// Adapter picks each receiver's decode target of each sender's video from
// the receiver's smoothed bandwidth estimate (its REMBs), the loss its
// receiver reports and NACKs show, and the bitrate of each target (the
// data plane's per-layer counters): layers.Chooser. A receiver's streams
// from several senders share its link: one of them at a time is tried
// up, loss during a try is the try's (the others hold), and a try undone
// holds the others' back for its back-off too.
type Adapter struct {
	plane    LayerPlane
	fb       *Feedback
	pliAfter time.Duration

	mu       sync.Mutex
	senders  map[netip.AddrPort]*adaptedSender
	choosers map[netip.AddrPort]*layers.Chooser // by receiver transport (one per sender and receiver)
	nacked   map[netip.AddrPort]*nackWindow
	hosts    map[netip.Addr]*receiverHost
}

type adaptedSender struct{ rates layers.Rates }

// receiverHost is a receiver's link: the stream being tried on it, and
// until when tries wait after one was undone.
type receiverHost struct {
	trying    netip.AddrPort
	seen      time.Time                  // the trying stream's last round
	base      map[netip.AddrPort]float64 // the other streams' estimates when the try began
	congested bool                       // loss on another stream, or its estimate fell, during the try
	quiet     time.Time                  // no try before
	quietBy   netip.AddrPort             // whose undone try set quiet
	drain     time.Time                  // the loss an undone try caused drains until then
}

// nackBurst is how many packets a receiver NACKs within nackRounds rounds
// that count as loss above any threshold: a queue overflowing, seen at
// once (its receiver reports come a second or more apart); 1% random loss
// of a 45-packet/s stream does not come near it.
const (
	nackBurst  = 5
	nackRounds = 4
)

// nackWindow is a receiver's NACKed packets over its last rounds.
type nackWindow struct {
	total  uint64
	rounds [nackRounds]uint64
	next   int
}

// burst adds the receiver's NACK count now and says whether its last
// rounds NACKed nackBurst packets or more.
func (w *nackWindow) burst(total uint64) bool {
	w.rounds[w.next%nackRounds] = total - min(w.total, total)
	w.total, w.next = total, w.next+1
	var sum uint64
	for _, n := range w.rounds {
		sum += n
	}
	return w.next > 1 && sum >= nackBurst
}

// clear forgets the rounds counted (their NACKs were another stream's try's doing).
func (w *nackWindow) clear() { w.rounds = [nackRounds]uint64{} }

// NewAdapter adapts through plane, from fb's estimates; pliAfter 0: 500 ms.
func NewAdapter(plane LayerPlane, fb *Feedback, pliAfter time.Duration) *Adapter {
	if pliAfter == 0 {
		pliAfter = 500 * time.Millisecond
	}
	return &Adapter{plane: plane, fb: fb, pliAfter: pliAfter, senders: map[netip.AddrPort]*adaptedSender{},
		choosers: map[netip.AddrPort]*layers.Chooser{}, nacked: map[netip.AddrPort]*nackWindow{}, hosts: map[netip.Addr]*receiverHost{}}
}

// Adapt runs one round for the sender's video (SSRC videoSSRC, feedback
// leaving by via); call it a few times a second.
func (a *Adapter) Adapt(now time.Time, sender, via netip.AddrPort, videoSSRC uint32) error {
	if !a.fb.Estimated(sender) {
		return nil // nobody reports an estimate: everyone gets every layer
	}
	ls, err := a.plane.Layers(sender)
	if err != nil || ls.Targets == 0 {
		return err
	}
	a.mu.Lock()
	s := a.senders[sender]
	if s == nil {
		s = &adaptedSender{}
		a.senders[sender] = s
	}
	s.rates.Observe(now, ls.Bytes)
	rates := s.rates.Bitrates(now)
	targets := make([]int, len(ls.Receivers))
	keyFrame := false
	for i, r := range ls.Receivers {
		targets[i] = a.choose(now, sender, r.To, rates, ls.Targets)
		keyFrame = keyFrame || r.SwitchWaiting >= a.pliAfter
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

// choose is the target of the receiver at to: every layer (-1) until it
// reports an estimate and the targets' rates are known.
func (a *Adapter) choose(now time.Time, sender, to netip.AddrPort, rates []float64, targets int) int {
	est, ok := a.fb.Estimate(sender, to)
	loss, nacked := a.fb.Loss(to)
	w := a.nacked[to]
	if w == nil {
		w = &nackWindow{total: nacked}
		a.nacked[to] = w
	}
	burst := w.burst(nacked)
	if !ok || rates[len(rates)-1] <= 0 {
		return -1
	}
	c := a.choosers[to]
	if c == nil {
		c = layers.NewChooser()
		a.choosers[to] = c
	}
	h := a.hosts[to.Addr()]
	if h == nil {
		h = &receiverHost{}
		a.hosts[to.Addr()] = h
	}
	if h.trying.IsValid() && h.trying != to && now.Sub(h.seen) > staleTry {
		h.end() // the trying stream is no longer adapted (left, no estimate): its try is over
	}
	if h.trying.IsValid() && h.trying != to {
		// Loss and a falling estimate here are the try's doing: they undo
		// the try, and this stream holds.
		w.clear()
		if h.base == nil {
			h.base = map[netip.AddrPort]float64{}
		}
		if _, ok := h.base[to]; !ok {
			h.base[to] = est
		}
		if burst || loss > c.LossHigh || est < c.Keep*h.base[to] {
			h.congested = true
		}
		if t, ok := c.Current(); ok && t < targets-1 {
			return t
		}
		return -1
	}
	if now.Before(h.drain) {
		w.clear()
		loss, burst = 0, false
	}
	if burst || (h.trying == to && h.congested) {
		loss = 1
	}
	t := c.Choose(now, est, loss, rates, !now.Before(h.quiet))
	switch {
	case c.Trying():
		h.trying, h.seen = to, now
	case h.trying == to:
		h.end()
		if c.NextTry().After(now) { // undone
			h.quiet, h.quietBy, h.drain = c.NextTry(), to, now.Add(layers.UndoGrace)
		}
	case h.quietBy == to && now.Before(h.quiet) && !c.NextTry().After(now):
		h.quiet = now // its back-off ended early: the link grew
	}
	if t >= targets-1 {
		return -1
	}
	return t
}

// Forget drops what was kept about a sender and its receivers.
func (a *Adapter) Forget(sender netip.AddrPort) {
	a.mu.Lock()
	delete(a.senders, sender)
	a.mu.Unlock()
}

// staleTry: a try whose stream has not been adapted for this long is over.
const staleTry = 2 * time.Second

// end ends the link's try.
func (h *receiverHost) end() { h.trying, h.congested, h.base = netip.AddrPort{}, false, nil }

// ForgetReceiver drops what was kept about a receiver's stream, and its
// link's once it has no stream left.
func (a *Adapter) ForgetReceiver(to netip.AddrPort) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.choosers, to)
	delete(a.nacked, to)
	h := a.hosts[to.Addr()]
	if h == nil {
		return
	}
	if h.trying == to {
		h.end()
	}
	delete(h.base, to)
	for other := range a.choosers {
		if other.Addr() == to.Addr() {
			return
		}
	}
	delete(a.hosts, to.Addr())
}
