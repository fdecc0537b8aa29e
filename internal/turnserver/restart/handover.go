package restart

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/ebrtc/ebrtc/internal/handover"
)

// The old process's side: hand everything to a successor (Upgrade), or
// stop and leave the fast path relaying (Stop with keep-offload). Both
// freeze the server, and thaw it again if that fails.

// Upgrade hands everything to a new process of the binary at path (the
// same command line): on success this server has stopped serving and only
// Close is left; on failure it serves on.
func (l *Lifecycle) Upgrade(path string, args []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(l.udp, func(u udpSocket) bool { return u.conn == nil }) {
		return errors.New("hand-over: not with rx afxdp (its AF_XDP sockets belong to this process): restart instead")
	}
	pins, unpin, err := l.pinForHandover()
	if err != nil {
		return err
	}
	var env []string
	if pins != "" {
		env = []string{envPins + "=" + pins}
	}
	succ, err := handover.Start(path, args, env, stdout, stderr)
	if err != nil {
		unpin()
		return err
	}
	if err := succ.WaitReady(handoverTimeout); err != nil {
		succ.Abandon()
		unpin()
		return err
	}
	start := time.Now()
	if err := l.handTo(succ); err != nil {
		unpin()
		return err
	}
	succ.Release()
	l.cfg.Log.Infof("handed over to pid %d (sockets unread for %v)", succ.Pid(), time.Since(start).Round(time.Millisecond))
	return nil
}

// handTo sends everything to a ready successor. On failure the successor
// is gone (killed, waited for) before this process serves on.
func (l *Lifecycle) handTo(succ *handover.Successor) error {
	fail := func(err error) error {
		succ.Abandon()
		l.thaw()
		return fmt.Errorf("%w; serving on", err)
	}
	st, files, err := l.freeze(true)
	if err != nil {
		return fail(err)
	}
	b, _ := json.Marshal(st)
	err = succ.Send(b, files)
	closeFiles(files)
	if err == nil {
		err = succ.WaitServing(handoverTimeout)
	}
	if err != nil {
		return fail(err)
	}
	l.handedOver = true
	return nil
}

// Stop comes first in the server's Close, once pion runs. With
// keep-offload, and the fast path this process's, the fast path relays on
// (pinned) while no process runs, and the allocations wait in the state
// file for the next start; if that fails, the fast path ends with the
// process.
func (l *Lifecycle) Stop() error {
	engine := l.host.Engine()
	if !l.cfg.KeepOffload || l.handedOver || engine == nil {
		return nil
	}
	st, _, err := l.freeze(false)
	if err == nil {
		err = writeStateFile(l.cfg.StateFile, st)
	}
	if err != nil {
		l.thaw()
		return errors.Join(fmt.Errorf("keep-offload: %w; the fast path ends with the process", err), engine.Unpin())
	}
	l.cfg.Log.Infof("stopped; the fast path relays on, %d allocations saved in %s", len(st.Allocations), l.cfg.StateFile)
	return nil
}

// freeze stops the readers and the servers of this process that the
// successor takes over, and snapshots the state.
func (l *Lifecycle) freeze(withFiles bool) (savedState, []*os.File, error) {
	if err := l.gate.hold(l.gatedSockets, holdTimeout); err != nil {
		return savedState{}, nil, err
	}
	l.host.StopEndpoints()
	// DTLS sessions cannot move: the listener goes, the successor binds anew.
	for _, ln := range l.dtls {
		_ = ln.Close()
	}
	l.dtls = nil
	st, files, err := l.snapshot(withFiles)
	if err != nil {
		return st, nil, err
	}
	// What pion does from now on (timers, closing) must not touch the
	// fast path, which belongs to the successor.
	l.host.DetachFastPath()
	return st, files, nil
}

// thaw undoes freeze after a failed hand-over. The successor may have
// swapped its program into the attachments and written its config: the
// fast path is taken back; its source guard on the shared sockets too.
func (l *Lifecycle) thaw() {
	if engine := l.host.Engine(); engine != nil {
		if err := engine.Reclaim(); err != nil {
			l.cfg.Log.Errorf("hand-over: fast path not taken back: %v", err)
		}
	}
	l.host.AttachFastPath()
	wake := l.gatedSockets()
	for _, c := range l.gatedConns() {
		if err := l.attachGuard(c); err != nil {
			l.cfg.Log.Warnf("hand-over: source guard: %v", err)
		}
	}
	l.gate.release(wake)
	l.host.StartEndpoints()
	if l.hasDTLS {
		l.cfg.Log.Warnf("hand-over failed: dtls listeners stay closed until a restart")
	}
}
