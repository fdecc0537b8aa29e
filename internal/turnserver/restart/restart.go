// Package restart is how `ebrtc turn` restarts without losing an
// allocation (docs/operations.md, "Restarts and upgrades"). Upgrade
// (SIGHUP) starts a successor and hands it the sockets (SCM_RIGHTS, over
// package handover), the allocations and the pinned fast path; a stop with
// keep-offload leaves the fast path relaying and saves the allocations for
// the next start, which binds their sockets again. Either way the new
// process removes fast-path entries whose allocation it does not know
// (what a crash leaves).
//
// A Lifecycle is one server's part in it: the listening sockets it hands
// over, the gate that stops their readers, what a predecessor left. What
// only the server knows (pion's allocations, the relay sockets, the fast
// path's channels, its endpoints) it reaches through Host.
package restart

import (
	"net"
	"time"

	"github.com/pion/logging"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/sockopt"
)

const (
	handoverTimeout = 30 * time.Second
	holdTimeout     = 5 * time.Second
	// envPins tells a successor where the fast path is pinned, so it loads
	// (and the verifier checks) its programs before asking for the state.
	envPins = "EBRTC_HANDOVER_PINS"
)

// Config is what of the server's settings restarts depend on.
type Config struct {
	Offload     bool   // the fast path is on (offload is not "off")
	KeepOffload bool   // a stop leaves the fast path relaying
	PinDir      string // where keep-offload pins the fast path (hand-overs next to it)
	StateFile   string // where keep-offload saves the allocations
	// OffloadConfig is the fast path's configuration on maps pinned in pinDir.
	OffloadConfig func(pinDir string) (offload.Config, error)
	Guard         sockopt.Control // attaches the source guard to a socket (nil: none)
	Log           logging.LeveledLogger
}

// Host is the server, for what only it knows.
type Host interface {
	// Engine is the fast path (nil: off).
	Engine() *offload.Engine
	// Export returns pion's allocations with their relay sockets, and what
	// ended allocations relayed per user (the readers are held).
	Export() ([]Allocation, map[string]admin.User)
	// Import gives pion an allocation on its relay socket: a.Conn, or one
	// bound again at a.Wire. It closes a.Conn if it fails.
	Import(a Allocation) error
	ImportUsers(map[string]admin.User)
	// RelayConns are the relay sockets, read through the gate.
	RelayConns() []net.PacketConn
	// Installed are the channels the fast path should hold.
	Installed() map[offload.Channel]bool
	// DetachFastPath keeps pion's events off the fast path (another
	// process's now); AttachFastPath lets them change it again.
	DetachFastPath()
	AttachFastPath()
	// StopEndpoints closes the metrics and admin endpoints (a successor
	// binds them); StartEndpoints serves those closed again.
	StopEndpoints()
	StartEndpoints()
}

// Lifecycle is a server's restarts: from New before it listens to Close.
type Lifecycle struct {
	cfg  Config
	host Host
	gate *Gate

	udp     []udpSocket // parallel to pion's PacketConnConfigs
	tcp     []tcpSocket
	dtls    []net.Listener // closed for a hand-over: their sessions cannot move
	hasDTLS bool           // dtls listeners were opened (a failed hand-over leaves them closed)

	inherited  *inheritance
	preloaded  *offload.Engine // loaded ahead of a hand-over (LoadEngine takes it)
	handedOver bool            // sockets and fast path belong to another process (a successor, or the predecessor this one failed to replace)
}

// New is the lifecycle of a server that has yet to listen.
func New(cfg Config, host Host) *Lifecycle {
	return &Lifecycle{cfg: cfg, host: host, gate: newGate()}
}

// Gate is what the server's sockets are read (and accepted) through.
func (l *Lifecycle) Gate() *Gate { return l.gate }

// Close ends the fast path loaded ahead of a hand-over and not taken
// (pinned: its predecessor's fast path stays).
func (l *Lifecycle) Close() error {
	if l.preloaded == nil {
		return nil
	}
	return l.preloaded.Close()
}
