// Package sfu assembles `ebrtc sfu`: the media sockets, a data plane (eBPF
// or user space), the agent, the controller and the web server.
package sfu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/sfu/agent"
	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// Config of an SFU.
type Config struct {
	Listen    string           // the web server (page and signaling)
	Media     []netip.AddrPort // media sockets: the ICE candidates, one per family
	Ifaces    []string         // where the eBPF data plane runs (TC ingress)
	Dataplane string           // "ebpf" or "user"
	// RX is how the user data plane receives: "kernel" (the default:
	// recvmmsg) or "afxdp" (AF_XDP sockets, pkg/afxdp).
	RX     string
	Codecs signaling.Codecs
	// NoRateAdaptation: every receiver gets every layer of every stream
	// (by default each receiver's AV1 temporal layers follow its estimate).
	NoRateAdaptation bool
	// MetricsListen, if set, serves Prometheus metrics (ebrtc_sfu_*) at
	// http://MetricsListen/metrics.
	MetricsListen string
	// AdminListen, if set, serves the admin endpoint (ebrtc top; package admin).
	AdminListen string
	Log         *slog.Logger
	// Ready, if set, gets the web server's address and the data plane
	// once it serves.
	Ready func(addr net.Addr, plane dataplane.Plane)
}

func (c *Config) validate() error {
	if len(c.Media) == 0 || len(c.Media) > 2 {
		return errors.New("sfu: media: want one address per family (1 or 2)")
	}
	for _, m := range c.Media {
		if !m.IsValid() || m.Addr().IsUnspecified() || m.Port() == 0 {
			return fmt.Errorf("sfu: media: %v: want a specific address and port", m)
		}
	}
	if len(c.Media) == 2 && c.Media[0].Addr().Unmap().Is4() == c.Media[1].Addr().Unmap().Is4() {
		return errors.New("sfu: media: two addresses of one family")
	}
	switch c.Dataplane {
	case "ebpf":
		if len(c.Ifaces) == 0 {
			return errors.New("sfu: iface: the eBPF data plane needs the interfaces media arrives on")
		}
	case "user":
	default:
		return fmt.Errorf("sfu: dataplane: %q (want ebpf or user)", c.Dataplane)
	}
	switch c.RX {
	case "", "kernel":
	case "afxdp":
		if c.Dataplane != "user" {
			return errors.New("sfu: rx: afxdp needs the user data plane (the eBPF one forwards in the kernel)")
		}
	default:
		return fmt.Errorf("sfu: rx: %q (want kernel or afxdp)", c.RX)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Run serves until ctx ends, then removes everything it installed.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	conns, rx, err := openMedia(cfg)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		for _, c := range rx {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	var ctrl *controller.Controller
	var agentReady atomic.Pointer[agent.Agent] // the planes call it from their own goroutines, once it is
	plane, err := openPlane(cfg, conns, rx, agentReady.Load)
	if err != nil {
		return err
	}
	defer plane.Close()
	ag, err := agent.New(agent.ICEConfig{OnBinding: func(b agent.Binding) { ctrl.OnBinding(b) }},
		agent.FeedbackConfig{Original: plane.Original}, conns)
	if err != nil {
		return err
	}
	agentReady.Store(ag)
	var adapter *agent.Adapter
	if !cfg.NoRateAdaptation {
		adapter = agent.NewAdapter(plane, ag.Feedback, 0)
	}
	if ctrl, err = controller.New(controller.Config{Codecs: cfg.Codecs, Media: cfg.Media, Plane: plane, Agent: ag,
		Adapter: adapter}); err != nil {
		return err
	}
	if cfg.MetricsListen != "" {
		m, err := metrics.Serve(cfg.MetricsListen, metrics.NewSFUCollector(cfg.Dataplane, plane, ctrl), metrics.NewAFXDPCollector(rx))
		if err != nil {
			return fmt.Errorf("sfu: %w", err)
		}
		defer m.Close()
	}
	if cfg.AdminListen != "" {
		a, err := admin.Serve(cfg.AdminListen, func() admin.Status { return status(ctrl, plane) })
		if err != nil {
			return fmt.Errorf("sfu: admin-listen: %w", err)
		}
		defer a.Close()
	}
	if cfg.Dataplane == "ebpf" {
		for _, c := range conns {
			go func() { _ = ag.Serve(c, func(err error) { cfg.Log.Debug("agent", "err", err) }) }()
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("sfu: listen: %w", err)
	}
	go housekeeping(ctx, ctrl, ag)
	srv := &http.Server{Handler: web.Handler(ctrl), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	cfg.Log.Info("sfu serving", "web", ln.Addr().String(), "media", cfg.Media, "dataplane", cfg.Dataplane)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr(), plane)
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openMedia opens the media sockets; with --rx afxdp each is the kernel
// socket of an AF_XDP conn (rx), which receives in its place.
func openMedia(cfg Config) (conns []*net.UDPConn, rx []*afxdp.Conn, err error) {
	for _, m := range cfg.Media {
		if cfg.RX == "afxdp" {
			c, err := afxdp.Listen("udp", m.String())
			if err != nil {
				return conns, rx, fmt.Errorf("sfu: media socket (rx afxdp): %w", err)
			}
			rx = append(rx, c)
			conns = append(conns, c.KernelConn())
			continue
		}
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(m))
		if err != nil {
			return conns, rx, fmt.Errorf("sfu: media socket: %w", err)
		}
		conns = append(conns, c)
	}
	return conns, rx, nil
}

func openPlane(cfg Config, conns []*net.UDPConn, rx []*afxdp.Conn, ag func() *agent.Agent) (dataplane.Plane, error) {
	if cfg.Dataplane == "user" {
		readers := map[*net.UDPConn]dataplane.DatagramReader{}
		for i, c := range rx {
			readers[conns[i]] = c
		}
		// The user plane reads the sockets; the agent gets what it is owed.
		return dataplane.NewUser(dataplane.UserConfig{Conns: conns, Readers: readers, Upcall: func(p []byte, from netip.AddrPort, c *net.UDPConn) {
			if a := ag(); a != nil {
				_ = a.Handle(p, from, c)
			}
		}})
	}
	send := func(p []byte, from, to netip.AddrPort) error {
		if a := ag(); a != nil {
			return a.Send(p, from, to)
		}
		return nil
	}
	d, err := dataplane.Load(dataplane.Config{Media: cfg.Media, Send: send})
	if err != nil {
		return nil, err
	}
	for _, iface := range cfg.Ifaces {
		if err := d.Attach(iface); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// adaptRounds is how many rate adaptation rounds run a second.
const adaptRounds = 4

// housekeeping adapts receivers' layers a few times a second, checks consent every second (RFC 7675) and asks again for
// key frames receivers still wait for.
func housekeeping(ctx context.Context, ctrl *controller.Controller, ag *agent.Agent) {
	t := time.NewTicker(time.Second / adaptRounds)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ctrl.Adapt()
			if ticks++; ticks%adaptRounds != 0 {
				continue
			}
			if gone := ag.ICE.Expire(); len(gone) > 0 {
				ctrl.Expired(gone)
			}
			ctrl.Tick()
		}
	}
}

// status is the SFU's snapshot for the admin endpoint: its rooms, with
// what each publisher sent into the data plane and the copies sent on.
func status(ctrl *controller.Controller, plane dataplane.Plane) admin.Status {
	st := admin.Status{Server: "sfu", Pid: os.Getpid(), Time: time.Now(), Rooms: ctrl.Snapshot()}
	for _, room := range st.Rooms {
		for i, p := range room.Participants {
			if !p.Publishes.IsValid() {
				continue
			}
			ss, err := plane.StreamStats(p.Publishes)
			if err != nil {
				continue
			}
			room.Participants[i].Sent = admin.Counter{Packets: ss.In.Packets, Bytes: ss.In.Bytes}
			for _, out := range ss.Out {
				room.Participants[i].Forwarded = room.Participants[i].Forwarded.Add(admin.Counter{Packets: out.Packets, Bytes: out.Bytes})
			}
		}
	}
	return st
}
