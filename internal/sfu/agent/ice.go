// Package agent is the SFU's agent: the little that needs state but not
// every packet. The data plane hands it STUN and RTCP feedback; it answers
// connectivity checks as an ICE-lite endpoint and tracks consent.
package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/pion/stun/v4"
)

// ConsentTimeout is how long a remote address stays valid without a
// successful connectivity check (RFC 7675 section 5.1: 30 s).
const ConsentTimeout = 30 * time.Second

// Session is one PeerConnection's ICE credentials: ours, which the SFU put
// in its description, and the browser's; and who hears of its bindings.
type Session struct {
	LocalUfrag, LocalPwd string
	RemoteUfrag          string
	// OnBinding: the session's first valid check from an address, or its
	// nomination (called without the ICE's lock held). The data plane's
	// entries for the connection follow from it.
	OnBinding func(Binding)
}

// Binding is a remote address a session's checks came from.
type Binding struct {
	LocalUfrag string
	Remote     netip.AddrPort
	Nominated  bool // the controlling side sent USE-CANDIDATE
}

// ICEConfig holds the clock.
type ICEConfig struct {
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// ICE answers connectivity checks for the sessions added to it (ICE-lite,
// RFC 8445 section 2.5: it never checks itself) and tracks consent.
type ICE struct {
	cfg ICEConfig

	mu       sync.Mutex
	sessions map[string]*session // by local ufrag
	byAddr   map[netip.AddrPort]*session
}

type session struct {
	Session
	remotes map[netip.AddrPort]*remote
}

type remote struct {
	lastCheck time.Time
	nominated bool
}

// NewICE is an ICE-lite responder without sessions.
func NewICE(cfg ICEConfig) *ICE {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &ICE{cfg: cfg, sessions: map[string]*session{}, byAddr: map[netip.AddrPort]*session{}}
}

// Add accepts checks for s from now on.
func (i *ICE) Add(s Session) error {
	// RFC 8445 5.3: ufrag at least 4 characters, password at least 22.
	if len(s.LocalUfrag) < 4 || len(s.LocalPwd) < 22 || s.RemoteUfrag == "" {
		return errors.New("agent: ICE session needs a local ufrag (>= 4), a local password (>= 22) and the remote ufrag")
	}
	if strings.Contains(s.LocalUfrag, ":") || strings.Contains(s.RemoteUfrag, ":") {
		return errors.New("agent: ICE ufrag with ':'")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if _, ok := i.sessions[s.LocalUfrag]; ok {
		return fmt.Errorf("agent: ICE session %q exists", s.LocalUfrag)
	}
	i.sessions[s.LocalUfrag] = &session{Session: s, remotes: map[netip.AddrPort]*remote{}}
	return nil
}

// Remove forgets a session: its checks are refused from now on.
func (i *ICE) Remove(localUfrag string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s := i.sessions[localUfrag]; s != nil {
		for addr := range s.remotes {
			i.forget(s, addr)
		}
	}
	delete(i.sessions, localUfrag)
}

// forget drops addr from the address index if it points at s.
func (i *ICE) forget(s *session, addr netip.AddrPort) {
	if i.byAddr[addr] == s {
		delete(i.byAddr, addr)
	}
}

// SessionAt is the local ufrag of the session whose valid checks (with
// consent) come from addr, if any: whose DTLS and media that address may
// send.
func (i *ICE) SessionAt(addr netip.AddrPort) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s := i.byAddr[addr]; s != nil {
		return s.LocalUfrag, true
	}
	return "", false
}

// ErrNotBindingRequest: a STUN message that asks nothing of us (an
// indication, a response): dropped without an answer.
var ErrNotBindingRequest = errors.New("agent: not a STUN binding request")

// Handle answers one STUN datagram received from the address from. It
// returns the response to send back: a success for a valid check, a 400 or
// 401 error for a bad one. Unparsable input and messages that are not
// requests return an error and no response.
func (i *ICE) Handle(datagram []byte, from netip.AddrPort) ([]byte, error) {
	m := &stun.Message{Raw: append([]byte(nil), datagram...)}
	if err := m.Decode(); err != nil {
		return nil, fmt.Errorf("agent: STUN: %w", err)
	}
	if m.Type != stun.BindingRequest {
		return nil, ErrNotBindingRequest
	}
	var user stun.Username
	if user.GetFrom(m) != nil || !m.Contains(stun.AttrMessageIntegrity) {
		return errorResponse(m, stun.CodeBadRequest)
	}
	local, remoteUfrag, ok := strings.Cut(user.String(), ":")
	i.mu.Lock()
	s := i.sessions[local]
	i.mu.Unlock()
	if !ok || s == nil || remoteUfrag != s.RemoteUfrag {
		return errorResponse(m, stun.CodeUnauthorized)
	}
	integrity := stun.NewShortTermIntegrity(s.LocalPwd)
	if integrity.Check(m) != nil {
		return errorResponse(m, stun.CodeUnauthorized)
	}
	if m.Contains(stun.AttrFingerprint) && stun.Fingerprint.Check(m) != nil {
		return errorResponse(m, stun.CodeBadRequest)
	}
	i.checked(s, from, m.Contains(stun.AttrUseCandidate))
	resp, err := stun.Build(stun.NewTransactionIDSetter(m.TransactionID), stun.BindingSuccess,
		&stun.XORMappedAddress{IP: from.Addr().AsSlice(), Port: int(from.Port())}, integrity, stun.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("agent: STUN response: %w", err)
	}
	return resp.Raw, nil
}

// checked records a valid check; a new address or a nomination is told.
func (i *ICE) checked(s *session, from netip.AddrPort, useCandidate bool) {
	now := i.cfg.Now()
	i.mu.Lock()
	if i.sessions[s.LocalUfrag] != s { // removed since the check was read
		i.mu.Unlock()
		return
	}
	r, known := s.remotes[from]
	if !known {
		r = &remote{}
		s.remotes[from] = r
	}
	i.byAddr[from] = s
	r.lastCheck = now
	tell := !known || (useCandidate && !r.nominated)
	r.nominated = r.nominated || useCandidate
	b := Binding{LocalUfrag: s.LocalUfrag, Remote: from, Nominated: r.nominated}
	i.mu.Unlock()
	if tell && s.OnBinding != nil {
		s.OnBinding(b)
	}
}

// Expire forgets and returns the bindings whose consent lapsed: no valid
// check for ConsentTimeout. Call it every second or so.
func (i *ICE) Expire() []Binding {
	now := i.cfg.Now()
	var out []Binding
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, s := range i.sessions {
		for addr, r := range s.remotes {
			if now.Sub(r.lastCheck) >= ConsentTimeout {
				out = append(out, Binding{LocalUfrag: s.LocalUfrag, Remote: addr, Nominated: r.nominated})
				delete(s.remotes, addr)
				i.forget(s, addr)
			}
		}
	}
	return out
}

func errorResponse(req *stun.Message, code stun.ErrorCode) ([]byte, error) {
	resp, err := stun.Build(stun.NewTransactionIDSetter(req.TransactionID),
		stun.NewType(stun.MethodBinding, stun.ClassErrorResponse), code, stun.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("agent: STUN error response: %w", err)
	}
	return resp.Raw, nil
}
