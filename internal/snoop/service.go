package snoop

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// Config of `ebrtc offload`.
type Config struct {
	Ifaces           []string // client-facing: XDP and the TC egress snooper
	RelayIfaces      []string // peer-facing, if different: XDP only
	ListenPorts      []uint16 // the TURN server's UDP ports
	MinPort, MaxPort uint16   // its relay port range
	RelayIPs         []netip.Addr
	RelayMap         map[netip.Addr]netip.Addr // advertised relay address -> on the wire
	Mode             offload.Mode              // hooks on every interface
	ManageForwarding bool
	MetricsListen    string
	ControlSocket    string        // Unix socket answering `ebrtc offload status` ("" : none)
	AdminListen      string        // admin endpoint for `ebrtc top` ("": none; see package admin)
	PinDir           string        // bpffs directory keeping the fast path across restarts ("" : none)
	StateFile        string        // the learner's state, for restarts (with PinDir)
	SpillEvery       uint32        // 1 packet per channel in SpillEvery to the server (0: off)
	SpillInterval    time.Duration // or one per interval (0: off)
	Log              *slog.Logger  // nil: slog.Default()
}

// Service is a running `ebrtc offload`.
type Service struct {
	Learner *Learner
	engine  *offload.Engine
	reader  *offload.SnoopReader
	metrics *http.Server
	control net.Listener
	admin   io.Closer
	log     *slog.Logger
	done    chan struct{}
}

// Defaults of `ebrtc offload`.
const (
	DefaultControlSocket = "/run/ebrtc/offload.sock"
	DefaultPinDir        = "/sys/fs/bpf/ebrtc/offload"
	DefaultStateFile     = "/run/ebrtc/offload-state.json"
)

// Remove ends a pinned fast path for good: the attachments go with their
// pins, and so does the state file. The TURN server then relays everything.
func Remove(pinDir, stateFile string) error {
	err := os.RemoveAll(pinDir)
	if stateFile != "" {
		err = errors.Join(err, ignoreNotExist(os.Remove(stateFile)))
	}
	return err
}

func ignoreNotExist(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Start loads the data plane with snooping on, attaches it and starts learning.
func Start(c Config) (*Service, error) {
	if len(c.Ifaces) == 0 {
		return nil, errors.New("offload: no --iface given")
	}
	engine, err := offload.Load(offload.Config{
		ListenPorts: c.ListenPorts, RelayPortMin: c.MinPort, RelayPortMax: c.MaxPort, RelayIPs: c.RelayIPs, Snoop: true,
		SpillEvery: c.SpillEvery, SpillInterval: c.SpillInterval, PinDir: c.PinDir,
	})
	if err != nil {
		return nil, err
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	s := &Service{engine: engine, log: c.Log, done: make(chan struct{})}
	s.Learner = NewLearner(engine, time.Now, func(format string, args ...any) { c.Log.Info(fmt.Sprintf(format, args...)) })
	s.Learner.MapRelays(c.RelayMap)
	if c.PinDir != "" && c.StateFile != "" {
		// A previous run's channels go on in the pinned maps: take them over.
		if err := s.Learner.Restore(c.StateFile, engine.Channels()); err != nil {
			engine.Close()
			return nil, fmt.Errorf("offload: state file: %w", err)
		}
	}
	if err := s.attach(c); err != nil {
		engine.Close()
		return nil, err
	}
	if s.reader, err = engine.SnoopReader(); err != nil {
		engine.Close()
		return nil, err
	}
	if c.MetricsListen != "" {
		if err := s.serveMetrics(c.MetricsListen); err != nil {
			s.Close()
			return nil, err
		}
	}
	if c.ControlSocket != "" {
		if err := s.serveStatus(c.ControlSocket); err != nil {
			s.Close()
			return nil, err
		}
	}
	if c.AdminListen != "" {
		if s.admin, err = admin.Serve(c.AdminListen, s.Status); err != nil {
			s.Close()
			return nil, fmt.Errorf("admin-listen: %w", err)
		}
	}
	go s.learn()
	go s.sweep()
	return s, nil
}

// Status is the service's snapshot for the admin endpoint. The server's
// own (user-space) relaying is not seen here: Slow stays zero.
func (s *Service) Status() admin.Status {
	st := admin.Status{Server: "offload", Pid: os.Getpid(), Time: time.Now()}
	admin.FastPath(s.engine, &st)
	st.Allocations = s.Learner.Allocations(s.engine.ChannelStats)
	return st
}

// serveStatus answers every connection on a Unix socket with the status text.
func (s *Service) serveStatus(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_ = os.Remove(path) // a stale socket from a previous run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	s.control = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, attachmentStatus(s.engine.Attachments())+s.Learner.Status(s.engine.ChannelStats))
			conn.Close()
		}
	}()
	return nil
}

// attachmentStatus says where the fast path runs and why, one line per interface.
func attachmentStatus(as []offload.Attachment) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "fast path on %s: %s (%s)\n", a.Iface, a.Hooks(), a.Reason)
	}
	return b.String()
}

// Status asks a running `ebrtc offload` for its status over its control socket.
func Status(path string) (string, error) {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("is ebrtc offload running? %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	return string(b), err
}

func (s *Service) attach(c Config) error {
	for _, name := range append(append([]string{}, c.Ifaces...), c.RelayIfaces...) {
		a, err := s.engine.Attach(name, c.Mode, c.ManageForwarding)
		if err != nil {
			return err
		}
		s.log.Info("fast path attached", "iface", name, "hooks", a.Hooks(), "reason", a.Reason)
	}
	for _, name := range c.Ifaces {
		if err := s.engine.AttachSnoopEgress(name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) learn() {
	for {
		ev, err := s.reader.Read()
		if errors.Is(err, offload.ErrClosed) {
			return
		}
		if err != nil {
			s.log.Warn("snoop read", "err", err)
			continue
		}
		s.Learner.Handle(ev)
	}
}

func (s *Service) sweep() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.Learner.Sweep()
		}
	}
}

func (s *Service) serveMetrics(addr string) error {
	m, err := metrics.Serve(addr, offload.NewCollector(s.engine, nil, s.Learner.Counts))
	if err != nil {
		return err
	}
	s.metrics = m
	return nil
}

// Close stops learning. Without a pin directory it detaches everything and
// the TURN server relays all traffic itself; with one, the fast path goes on
// until the next run takes it over (or Remove ends it).
func (s *Service) Close() error {
	close(s.done)
	var errs []error
	if s.metrics != nil {
		errs = append(errs, s.metrics.Close())
	}
	if s.control != nil {
		errs = append(errs, s.control.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Close())
	}
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	errs = append(errs, s.engine.Close())
	return errors.Join(errs...)
}
