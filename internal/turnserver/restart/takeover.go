package restart

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"

	"github.com/pion/logging"

	"github.com/ebrtc/ebrtc/internal/handover"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// The new process's side: Inherit before it listens, TakeOver once pion
// runs, then Serving, or StartFailed.

// inheritance is what a predecessor left this process.
type inheritance struct {
	state savedState
	files []*os.File
	pred  *handover.Predecessor // nil: from a state file
}

// Inherit takes the predecessor's state, before the server listens:
// handed over (this process was started by Upgrade) or saved by a stop
// with keep-offload; the gate is held until TakeOver. Then it removes the
// fast path that hand-overs which died mid-way left pinned.
func (l *Lifecycle) Inherit() error {
	if err := l.inherit(); err != nil {
		return err
	}
	l.removeDeadHandoverPins()
	return nil
}

func (l *Lifecycle) inherit() error {
	pred, err := handover.Inherited()
	if err != nil {
		return err
	}
	if pred != nil {
		l.gate.held.Store(true) // until TakeOver
		l.preload(os.Getenv(envPins))
		b, files, err := pred.Receive(handoverTimeout)
		if err != nil {
			return err
		}
		l.inherited = &inheritance{files: files, pred: pred}
		if err := json.Unmarshal(b, &l.inherited.state); err != nil {
			return fmt.Errorf("hand-over: state: %w", err)
		}
		if v := l.inherited.state.Version; v != stateVersion {
			return fmt.Errorf("hand-over: state version %d, this server reads %d", v, stateVersion)
		}
		return nil
	}
	st, err := readStateFile(l.cfg.StateFile)
	if err != nil {
		l.cfg.Log.Warnf("saved allocations not restored: %v", err)
		return nil
	}
	if st != nil {
		l.inherited = &inheritance{state: *st}
		l.gate.held.Store(true) // until TakeOver
	}
	return nil
}

// inheritedFile takes the saved listener's file for scheme, addr and
// ordinal, if the predecessor sent one.
func (l *Lifecycle) inheritedFile(scheme string, addr netip.AddrPort, ordinal int) *os.File {
	if l.inherited == nil {
		return nil
	}
	for _, s := range l.inherited.state.Listeners {
		if s.Scheme == scheme && s.Addr == addr && s.Ordinal == ordinal && s.File >= 0 && s.File < len(l.inherited.files) {
			return l.inherited.files[s.File]
		}
	}
	return nil
}

// inheritedUDPCount is how many sockets the predecessor had on a UDP
// listener.
func (l *Lifecycle) inheritedUDPCount(addr netip.AddrPort) int {
	if l.inherited == nil {
		return 0
	}
	n := 0
	for _, s := range l.inherited.state.Listeners {
		if s.Scheme == "udp" && s.Addr == addr {
			n++
		}
	}
	return n
}

// TakeOver, once pion runs, imports what the predecessor left and removes
// fast-path entries no allocation of this process accounts for.
func (l *Lifecycle) TakeOver() {
	engine := l.host.Engine()
	// The pinned channels first: one bound while the table is read below
	// is then in both lists, never removed as stale.
	var pinned []offload.Channel
	if engine != nil {
		pinned = engine.Channels()
	}
	if in := l.inherited; in != nil {
		// pion reads the listeners from NewServer on: until the
		// allocations are in, a client's datagram would find none.
		defer l.gate.release(nil)
		l.importInherited(in)
	}
	wanted := l.host.Installed()
	stale := 0
	for _, ch := range pinned {
		if wanted[ch] {
			continue
		}
		if err := engine.RemoveChannel(ch); err != nil {
			l.cfg.Log.Warnf("fast path: remove stale %v: %v", ch, err)
			continue
		}
		stale++
	}
	if stale > 0 {
		l.cfg.Log.Infof("removed %d fast-path channels no allocation accounts for", stale)
	}
}

func (l *Lifecycle) importInherited(in *inheritance) {
	n := l.importAllocations(in.state, in.files)
	how := "saved in " + l.cfg.StateFile
	if in.pred != nil {
		how = "handed over"
	} else {
		_ = os.Remove(l.cfg.StateFile) // used: not for another start
	}
	l.cfg.Log.Infof("took over %d of %d allocations (%s)", n, len(in.state.Allocations), how)
	l.host.ImportUsers(in.state.Users)
}

// Serving ends a start that succeeded: pins no fast path uses are
// removed, and a predecessor is told to go.
func (l *Lifecycle) Serving() {
	l.dropUnusedPins()
	l.inherited.serving(l.cfg.Log)
	l.inherited = nil
}

func (in *inheritance) serving(log logging.LeveledLogger) {
	if in == nil {
		return
	}
	closeFiles(in.files) // each socket in use has a descriptor of its own now
	if in.pred != nil {
		// Before the predecessor exits: systemd must not see the main
		// process go before it learns the new one.
		_ = handover.Notify(fmt.Sprintf("MAINPID=%d", os.Getpid()))
		if err := in.pred.Serving(); err != nil {
			log.Warnf("%v", err)
		}
	}
}

// StartFailed ends a start that failed: the fast path is left to a
// predecessor, the server closed (closeServer), and only then the
// predecessor told to serve on: never both at once.
func (l *Lifecycle) StartFailed(err error, closeServer func() error) {
	l.leaveToPredecessor()
	_ = closeServer()
	l.inherited.failed(err)
}

// leaveToPredecessor makes a successor that fails to start leave the fast
// path to the predecessor, which serves on: its Close must neither remove
// channels nor detach the program.
func (l *Lifecycle) leaveToPredecessor() {
	in := l.inherited
	if in == nil || in.pred == nil {
		return
	}
	l.handedOver = true // back, in fact
	l.host.DetachFastPath()
	engine := l.host.Engine()
	if engine != nil && engine.PinDir() == "" && in.state.PinDir != "" {
		if err := engine.Pin(in.state.PinDir); err != nil {
			l.cfg.Log.Warnf("hand-over: re-pin for the predecessor: %v", err)
		}
	}
}

func (in *inheritance) failed(err error) {
	if in == nil {
		return
	}
	if in.pred != nil {
		in.pred.Failed(err)
	}
	closeFiles(in.files)
}
