package restart

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ebrtc/ebrtc/internal/offload"
)

// The fast path outlives a process only pinned (bpffs): in pin-dir with
// keep-offload, and in a directory of its own for a hand-over.

// LoadEngine loads the fast path: the one loaded ahead of a hand-over, with
// the pinned channels read now that the predecessor is held, or a new one.
func (l *Lifecycle) LoadEngine() (*offload.Engine, error) {
	if e := l.preloaded; e != nil {
		l.preloaded = nil
		if e.PinDir() == l.pinDirToLoad() {
			if err := e.Restore(); err != nil {
				e.Close()
				return nil, err
			}
			return e, nil
		}
		e.Close()
	}
	cfg, err := l.cfg.OffloadConfig(l.pinDirToLoad())
	if err != nil {
		return nil, err
	}
	return offload.Load(cfg)
}

// preload loads the fast path on the predecessor's pinned maps while it
// still serves: the verifier's time is then not spent with its sockets
// unread. The channels are read later (LoadEngine), once it is held.
func (l *Lifecycle) preload(pins string) {
	os.Unsetenv(envPins)
	if pins == "" || !l.cfg.Offload {
		return
	}
	cfg, err := l.cfg.OffloadConfig(pins)
	if err != nil {
		return
	}
	cfg.DeferRestore = true
	if l.preloaded, err = offload.Load(cfg); err != nil {
		l.cfg.Log.Warnf("hand-over: fast path not loaded ahead: %v", err)
	}
}

// pinDirToLoad is where the fast path's maps are taken from: the
// predecessor's pins, the configured pin-dir with keep-offload, or pins an
// earlier run left there (a crash, or keep-offload turned off since).
func (l *Lifecycle) pinDirToLoad() string {
	if l.inherited != nil && l.inherited.state.PinDir != "" {
		return l.inherited.state.PinDir
	}
	if l.cfg.KeepOffload || hasPins(l.cfg.PinDir) {
		return l.cfg.PinDir
	}
	return ""
}

func hasPins(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// SettlePins leaves the attached fast path pinned in pin-dir with
// keep-offload, and unpinned (ending with this process) without.
func (l *Lifecycle) SettlePins(engine *offload.Engine) {
	loaded, keep, pinDir := engine.PinDir(), l.cfg.KeepOffload, l.cfg.PinDir
	if loaded == pinDir && keep || loaded == "" && !keep {
		return
	}
	if loaded != "" {
		if err := engine.Unpin(); err != nil {
			l.cfg.Log.Warnf("fast path: unpin %s: %v", loaded, err)
		}
		_ = os.Remove(loaded)
	}
	if keep {
		if err := engine.Pin(pinDir); err != nil {
			l.cfg.Log.Warnf("fast path: pin in %s: %v (keep-offload will not keep it)", pinDir, err)
		}
	}
}

func (l *Lifecycle) pinDir() string {
	if e := l.host.Engine(); e != nil {
		return e.PinDir()
	}
	return ""
}

// pinForHandover pins the fast path for the successor (unless it is pinned
// already, with keep-offload) and says where; unpin undoes it, if the
// hand-over fails: the fast path then ends with this process again.
func (l *Lifecycle) pinForHandover() (dir string, unpin func(), err error) {
	unpin = func() {}
	engine := l.host.Engine()
	if engine == nil {
		return "", unpin, nil
	}
	if dir = engine.PinDir(); dir != "" {
		return dir, unpin, nil
	}
	dir = handoverPinDir(l.cfg.PinDir, os.Getpid())
	if err := engine.Pin(dir); err != nil {
		return "", unpin, err
	}
	return dir, func() {
		_ = engine.Unpin()
		_ = os.Remove(dir)
	}, nil
}

// handoverPinDir is where a process pins its fast path for a hand-over.
func handoverPinDir(pinDir string, pid int) string {
	return filepath.Join(filepath.Dir(pinDir), "handover-"+strconv.Itoa(pid))
}

// removeDeadHandoverPins removes the fast path a process pinned for a
// hand-over and then died with (killed mid-way): nothing would ever update
// it again. A live process's (a hand-over in progress) stays.
func (l *Lifecycle) removeDeadHandoverPins() {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(l.cfg.PinDir), "handover-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "handover-"))
		if err != nil || (l.inherited != nil && l.inherited.state.PinDir == dir) {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			l.cfg.Log.Warnf("removed the fast path pid %d pinned for a hand-over it did not finish", pid)
		}
	}
}

// dropUnusedPins: a process that took no fast path over (offload off, or
// it could not load) removes the pins it inherited, so the old program
// ends with its last process instead of relaying on unowned.
func (l *Lifecycle) dropUnusedPins() {
	if l.host.Engine() != nil {
		return
	}
	dirs := []string{l.cfg.PinDir}
	if in := l.inherited; in != nil && in.state.PinDir != "" {
		dirs = append(dirs, in.state.PinDir)
	}
	for _, dir := range dirs {
		if hasPins(dir) && os.RemoveAll(dir) == nil {
			l.cfg.Log.Warnf("fast path not taken over: its pins in %s are removed (it ends with the process that attached it)", dir)
		}
	}
}
