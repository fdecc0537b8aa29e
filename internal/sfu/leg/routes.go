// Package leg owns what the SFU keeps per (sender, receiver) leg: the
// data plane's side of it (its slot, numbers, transport-wide log), its
// decode target and why it moved, its retransmissions (from the sender's
// history, on RTX, paced within the receiver's estimate) and what its
// receiver's feedback says. A receiver's legs share its link, whose
// estimate and allocation (package ratecontrol) they take their targets
// from; a sender's legs share what the SFU asks of the sender (key
// frames, retransmissions of what the SFU never got, the estimate of its
// best downlink). Removing a leg is one call.
package leg

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/pion/rtcp"
)

// Routes says which leg each receiver transport address is (each
// receiver has one receive-only PeerConnection per remote sender, so its
// address names one leg, as in Scallop section 5.3). The agent routes
// receivers' RTCP through it (agent.Router).
type Routes struct {
	mu   sync.RWMutex
	legs map[netip.AddrPort]*Leg
}

// NewRoutes has no legs.
func NewRoutes() *Routes { return &Routes{legs: map[netip.AddrPort]*Leg{}} }

// Feedback hands one receiver's RTCP compound to its leg.
func (r *Routes) Feedback(from netip.AddrPort, pkts []rtcp.Packet) error {
	r.mu.RLock()
	l := r.legs[from]
	r.mu.RUnlock()
	if l == nil {
		return fmt.Errorf("leg: RTCP from %v, which receives nothing", from)
	}
	l.feedback(pkts)
	return nil
}

func (r *Routes) add(l *Leg) {
	r.mu.Lock()
	r.legs[l.cfg.To] = l
	r.mu.Unlock()
}

func (r *Routes) remove(l *Leg) {
	r.mu.Lock()
	if r.legs[l.cfg.To] == l {
		delete(r.legs, l.cfg.To)
	}
	r.mu.Unlock()
}
