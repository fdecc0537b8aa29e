package turnserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pion/logging"

	"github.com/ebrtc/ebrtc/internal/handover"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/sockopt"
)

// Restarts that lose nothing (docs/operations.md). Upgrade (SIGHUP) starts
// a successor and hands it the sockets (SCM_RIGHTS), the allocations and the
// pinned fast path; a stop with keep-offload leaves the fast path relaying
// and saves the allocations for the next start, which binds their sockets
// again. Either way the new process removes fast-path entries whose
// allocation it does not know (what a crash leaves).

const (
	handoverTimeout = 30 * time.Second
	holdTimeout     = 5 * time.Second
	// envPins tells a successor where the fast path is pinned, so it loads
	// (and the verifier checks) its programs before asking for the state.
	envPins = "EBRTC_HANDOVER_PINS"
)

// inheritance is what a predecessor left this process.
type inheritance struct {
	state savedState
	files []*os.File
	pred  *handover.Predecessor // nil: from a state file
}

// inherit takes the predecessor's state: handed over (this process was
// started by Upgrade) or saved by a stop with keep-offload.
func (srv *Server) inherit() error {
	pred, err := handover.Inherited()
	if err != nil {
		return err
	}
	if pred != nil {
		srv.gate.held.Store(true) // until takeOver
		srv.preload(os.Getenv(envPins))
		b, files, err := pred.Receive(handoverTimeout)
		if err != nil {
			return err
		}
		srv.inherited = &inheritance{files: files, pred: pred}
		if err := json.Unmarshal(b, &srv.inherited.state); err != nil {
			return fmt.Errorf("hand-over: state: %w", err)
		}
		if v := srv.inherited.state.Version; v != stateVersion {
			return fmt.Errorf("hand-over: state version %d, this server reads %d", v, stateVersion)
		}
		return nil
	}
	st, err := readStateFile(srv.settings.StateFile)
	if err != nil {
		srv.log.Warnf("saved allocations not restored: %v", err)
		return nil
	}
	if st != nil {
		srv.inherited = &inheritance{state: *st}
		srv.gate.held.Store(true) // until takeOver
	}
	return nil
}

// preload loads the fast path on the predecessor's pinned maps while it
// still serves: the verifier's time is then not spent with its sockets
// unread. The channels are read later (loadEngine), once it is held.
func (srv *Server) preload(pins string) {
	os.Unsetenv(envPins)
	if pins == "" || srv.settings.Offload == "off" {
		return
	}
	cfg, err := srv.settings.offloadConfig(pins)
	if err != nil {
		return
	}
	cfg.DeferRestore = true
	if srv.preloaded, err = offload.Load(cfg); err != nil {
		srv.log.Warnf("hand-over: fast path not loaded ahead: %v", err)
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

// listenUDP is the ordinal-th socket of a UDP listener: inherited, or new.
func (srv *Server) listenUDP(l Listener, network string, ordinal int) (*net.UDPConn, error) {
	if f := srv.inheritedFile(l, "udp", ordinal); f != nil {
		conn, err := net.FilePacketConn(f)
		if err == nil {
			err = srv.checkSocket(conn, l.Addr)
		}
		if err == nil {
			// The predecessor's source guard goes with it: attach ours.
			err = srv.attachGuard(conn)
		}
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			return nil, fmt.Errorf("hand-over: udp://%s: %w", l.Addr, err)
		}
		return conn.(*net.UDPConn), nil
	}
	lc := net.ListenConfig{Control: sockopt.ControlWith(sockopt.ReusePort, sockopt.UDPBuffers, srv.guardControl())}
	conn, err := lc.ListenPacket(context.Background(), "udp"+network, l.Addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen udp://%s: %w", l.Addr, err)
	}
	return conn.(*net.UDPConn), nil
}

// listenTCP is a tcp:// or tls:// listener's socket: inherited, or new.
func (srv *Server) listenTCP(l Listener, network string) (*net.TCPListener, error) {
	if f := srv.inheritedFile(l, l.Scheme, 0); f != nil {
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("hand-over: %s://%s: %w", l.Scheme, l.Addr, err)
		}
		return ln.(*net.TCPListener), nil
	}
	ln, err := net.Listen("tcp"+network, l.Addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen %s://%s: %w", l.Scheme, l.Addr, err)
	}
	return ln.(*net.TCPListener), nil
}

// attachGuard sets an inherited socket up as a new one: buffers, guard.
func (srv *Server) attachGuard(conn net.PacketConn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return sockopt.ControlWith(sockopt.UDPBuffers, srv.guardControl())("", "", rc)
}

func (srv *Server) pinDir() string {
	if srv.engine == nil {
		return ""
	}
	return srv.engine.PinDir()
}

// pinDirToLoad is where the fast path's maps are taken from: the
// predecessor's pins, the configured pin-dir with keep-offload, or pins an
// earlier run left there (a crash, or keep-offload turned off since).
func (srv *Server) pinDirToLoad() string {
	if srv.inherited != nil && srv.inherited.state.PinDir != "" {
		return srv.inherited.state.PinDir
	}
	if srv.settings.KeepOffload || hasPins(srv.settings.PinDir) {
		return srv.settings.PinDir
	}
	return ""
}

func hasPins(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// settlePins leaves the fast path pinned in pin-dir with keep-offload, and
// unpinned (ending with this process) without.
func (srv *Server) settlePins(engine *offload.Engine) {
	s := srv.settings
	loaded := engine.PinDir()
	if loaded == s.PinDir && s.KeepOffload || loaded == "" && !s.KeepOffload {
		return
	}
	if loaded != "" {
		if err := engine.Unpin(); err != nil {
			srv.log.Warnf("fast path: unpin %s: %v", loaded, err)
		}
		_ = os.Remove(loaded)
	}
	if s.KeepOffload {
		if err := engine.Pin(s.PinDir); err != nil {
			srv.log.Warnf("fast path: pin in %s: %v (keep-offload will not keep it)", s.PinDir, err)
		}
	}
}

// takeOver imports what the predecessor left and removes fast-path entries
// no allocation of this process accounts for.
func (srv *Server) takeOver() error {
	// The pinned channels first: one bound while the table is read below
	// is then in both lists, never removed as stale.
	var pinned []offload.Channel
	if srv.engine != nil {
		pinned = srv.engine.Channels()
	}
	if in := srv.inherited; in != nil {
		// pion reads the listeners from NewServer on: until the
		// allocations are in, a client's datagram would find none.
		defer srv.gate.release(nil)
		n := srv.importAllocations(in.state, in.files)
		how := "saved in " + srv.settings.StateFile
		if in.pred != nil {
			how = "handed over"
		} else {
			_ = os.Remove(srv.settings.StateFile) // used: not for another start
		}
		srv.log.Infof("took over %d of %d allocations (%s)", n, len(in.state.Allocations), how)
		srv.gen.users.restore(in.state.Users)
	}
	wanted := srv.table.installed()
	stale := 0
	for _, ch := range pinned {
		if wanted[ch] {
			continue
		}
		if err := srv.engine.RemoveChannel(ch); err != nil {
			srv.log.Warnf("fast path: remove stale %v: %v", ch, err)
			continue
		}
		stale++
	}
	if stale > 0 {
		srv.log.Infof("removed %d fast-path channels no allocation accounts for", stale)
	}
	return nil
}

// Upgrade hands everything to a new process of the binary at path (the
// same command line): on success this server has stopped serving and only
// Close is left; on failure it serves on.
func (srv *Server) Upgrade(path string, args []string, stdout, stderr io.Writer) error {
	if len(srv.afxdpConns) > 0 {
		return errors.New("hand-over: not with rx afxdp (its AF_XDP sockets belong to this process): restart instead")
	}
	pins, unpin, err := srv.pinForHandover()
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
	if err := srv.handTo(succ); err != nil {
		unpin()
		return err
	}
	succ.Release()
	srv.log.Infof("handed over to pid %d (sockets unread for %v)", succ.Pid(), time.Since(start).Round(time.Millisecond))
	return nil
}

// handTo sends everything to a ready successor. On failure the successor
// is gone (killed, waited for) before this process serves on.
func (srv *Server) handTo(succ *handover.Successor) error {
	fail := func(err error) error {
		succ.Abandon()
		srv.thaw()
		return fmt.Errorf("%w; serving on", err)
	}
	st, files, err := srv.freeze(true)
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
	srv.handedOver = true
	return nil
}

// pinForHandover pins the fast path for the successor (unless it is pinned
// already, with keep-offload) and says where; unpin undoes it, if the
// hand-over fails: the fast path then ends with this process again.
func (srv *Server) pinForHandover() (dir string, unpin func(), err error) {
	unpin = func() {}
	if srv.engine == nil {
		return "", unpin, nil
	}
	if dir = srv.engine.PinDir(); dir != "" {
		return dir, unpin, nil
	}
	dir = handoverPinDir(srv.settings.PinDir, os.Getpid())
	if err := srv.engine.Pin(dir); err != nil {
		return "", unpin, err
	}
	return dir, func() {
		_ = srv.engine.Unpin()
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
func (srv *Server) removeDeadHandoverPins() {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(srv.settings.PinDir), "handover-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "handover-"))
		if err != nil || (srv.inherited != nil && srv.inherited.state.PinDir == dir) {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			srv.log.Warnf("removed the fast path pid %d pinned for a hand-over it did not finish", pid)
		}
	}
}

// dropUnusedPins: a process that took no fast path over (offload off, or
// it could not load) removes the pins it inherited, so the old program
// ends with its last process instead of relaying on unowned.
func (srv *Server) dropUnusedPins() {
	if srv.engine != nil {
		return
	}
	dirs := []string{srv.settings.PinDir}
	if in := srv.inherited; in != nil && in.state.PinDir != "" {
		dirs = append(dirs, in.state.PinDir)
	}
	for _, dir := range dirs {
		if hasPins(dir) && os.RemoveAll(dir) == nil {
			srv.log.Warnf("fast path not taken over: its pins in %s are removed (it ends with the process that attached it)", dir)
		}
	}
}

// leaveToPredecessor makes a successor that fails to start leave the fast
// path to the predecessor, which serves on: its Close must neither remove
// channels nor detach the program.
func (srv *Server) leaveToPredecessor() {
	in := srv.inherited
	if in == nil || in.pred == nil {
		return
	}
	srv.handedOver = true // back, in fact
	if srv.table != nil {
		srv.table.detachSink()
	}
	if srv.engine != nil && srv.engine.PinDir() == "" && in.state.PinDir != "" {
		if err := srv.engine.Pin(in.state.PinDir); err != nil {
			srv.log.Warnf("hand-over: re-pin for the predecessor: %v", err)
		}
	}
}

// freeze stops the readers and the servers of this process that the
// successor takes over, and snapshots the state.
func (srv *Server) freeze(withFiles bool) (savedState, []*os.File, error) {
	if err := srv.gate.hold(srv.gatedSockets, holdTimeout); err != nil {
		return savedState{}, nil, err
	}
	if srv.metrics != nil {
		_ = srv.metrics.Close()
		srv.metrics = nil
	}
	if srv.admin != nil {
		_ = srv.admin.Close()
		srv.admin = nil
	}
	// DTLS sessions cannot move: the listener goes, the successor binds anew.
	for _, l := range srv.dtlsListeners {
		_ = l.Close()
	}
	srv.dtlsListeners = nil
	st, files, err := srv.snapshot(withFiles)
	if err != nil {
		return st, nil, err
	}
	// What pion does from now on (timers, closing) must not touch the
	// fast path, which belongs to the successor.
	srv.table.detachSink()
	return st, files, nil
}

// thaw undoes freeze after a failed hand-over. The successor may have
// swapped its program into the attachments and written its config: the
// fast path is taken back; its source guard on the shared sockets too.
func (srv *Server) thaw() {
	if srv.engine != nil {
		if err := srv.engine.Reclaim(); err != nil {
			srv.log.Errorf("hand-over: fast path not taken back: %v", err)
		}
	}
	srv.table.attachSink(srv.sink())
	wake := srv.gatedSockets()
	for _, c := range srv.gatedConns() {
		if err := srv.attachGuard(c); err != nil {
			srv.log.Warnf("hand-over: source guard: %v", err)
		}
	}
	srv.gate.release(wake)
	if srv.metrics == nil && srv.settings.MetricsListen != "" {
		if err := srv.serveMetrics(); err != nil {
			srv.log.Warnf("metrics: %v", err)
		}
	}
	if srv.admin == nil {
		if err := srv.serveAdmin(); err != nil {
			srv.log.Warnf("%v", err)
		}
	}
	if srv.hasDTLS() {
		srv.log.Warnf("hand-over failed: dtls listeners stay closed until a restart")
	}
}

func (srv *Server) hasDTLS() bool {
	for _, l := range srv.settings.Listeners {
		if l.Scheme == "dtls" {
			return true
		}
	}
	return false
}

func (srv *Server) sink() channelSink {
	if srv.engine == nil {
		return discardSink{}
	}
	return srv.engine
}

// gatedConns are the UDP sockets read through the gate.
func (srv *Server) gatedConns() []net.PacketConn {
	var out []net.PacketConn
	for _, u := range srv.udpSockets {
		if u.conn != nil {
			out = append(out, u.conn)
		}
	}
	return append(out, srv.gen.live.conns()...)
}

// gatedSockets wake the gate's readers and acceptors.
func (srv *Server) gatedSockets() []wakeFunc {
	var out []wakeFunc
	for _, c := range srv.gatedConns() {
		out = append(out, c.SetReadDeadline)
	}
	for _, t := range srv.tcpSockets {
		out = append(out, t.ln.SetDeadline)
	}
	return out
}

// closeKeepingOffload is Close with keep-offload: the fast path relays on
// (pinned) while no process runs, and the allocations wait in the state
// file for the next start.
func (srv *Server) closeKeepingOffload() error {
	st, _, err := srv.freeze(false)
	if err == nil {
		err = writeStateFile(srv.settings.StateFile, st)
	}
	if err != nil {
		srv.thaw()
		return fmt.Errorf("keep-offload: %w; the fast path ends with the process", err)
	}
	srv.log.Infof("stopped; the fast path relays on, %d allocations saved in %s", len(st.Allocations), srv.settings.StateFile)
	return nil
}
