package secure

import (
	"errors"
	"net/netip"
	"sync"
)

// Transports are the SFU's DTLS-SRTP transports by ICE session (local
// ufrag). A DTLS record goes to the transport of the session whose valid
// checks came from its address (as a browser takes DTLS only on a pair
// ICE checked): anything else is refused before it costs a handshake.
type Transports struct {
	sessionAt func(netip.AddrPort) (string, bool)

	mu sync.Mutex
	by map[string]*Transport
}

// NewTransports finds sessions with sessionAt (agent.ICE.SessionAt).
func NewTransports(sessionAt func(netip.AddrPort) (string, bool)) *Transports {
	return &Transports{sessionAt: sessionAt, by: map[string]*Transport{}}
}

// Add makes t the transport of the ICE session ufrag (replacing and
// closing one there was).
func (r *Transports) Add(ufrag string, t *Transport) {
	r.mu.Lock()
	old := r.by[ufrag]
	r.by[ufrag] = t
	r.mu.Unlock()
	if old != nil && old != t {
		old.Close()
	}
}

// Remove closes the session's transport: its keys are gone.
func (r *Transports) Remove(ufrag string) {
	r.mu.Lock()
	t := r.by[ufrag]
	delete(r.by, ufrag)
	r.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

// ErrNoSession: DTLS from an address no ICE session has checked.
var ErrNoSession = errors.New("secure: DTLS from an address without a checked ICE session")

// Handle takes a DTLS record from `from` (the agent's hook).
func (r *Transports) Handle(p []byte, from netip.AddrPort) error {
	ufrag, ok := r.sessionAt(from)
	if !ok {
		return ErrNoSession
	}
	r.mu.Lock()
	t := r.by[ufrag]
	r.mu.Unlock()
	if t == nil {
		return ErrNoSession
	}
	t.Handle(p, from)
	return nil
}

// Close closes every transport (the SFU stopping).
func (r *Transports) Close() {
	r.mu.Lock()
	all := r.by
	r.by = map[string]*Transport{}
	r.mu.Unlock()
	for _, t := range all {
		t.Close()
	}
}
