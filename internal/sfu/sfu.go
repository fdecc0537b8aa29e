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
	"path"
	"runtime"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/agent"
	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/leg"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// Config of an SFU.
type Config struct {
	Listen string           // the web server (page and signaling)
	Web    web.TLS          // HTTPS (a certificate given, or self-signed: the default) or plain HTTP
	Media  []netip.AddrPort // media sockets: the ICE candidates, one per family
	Ifaces []string         // where the eBPF data plane runs (TC ingress), or with RX afxdp the AF_XDP sockets (default: the media address's interface)
	// Dataplane is "user" (the default with encrypted media) or "ebpf"
	// (the default with Unencrypted: forwarding in TC BPF).
	Dataplane string
	// Unencrypted: media is plain RTP (browsers with their encryption
	// off), which the eBPF data plane can forward. By default every
	// connection is DTLS-SRTP and the user data plane decrypts each
	// packet once and encrypts each replica for its receiver.
	Unencrypted bool
	// RX is how the user data plane receives: "kernel" (the default:
	// recvmmsg) or "afxdp" (AF_XDP sockets, pkg/afxdp).
	RX string
	// Workers is how many sockets each media address has on the user data
	// plane's kernel receive (one SO_REUSEPORT group), each read by a
	// goroutine of its own: 0 (the default) one per CPU the process may
	// use (GOMAXPROCS), at most 8; at most 64 given. The eBPF data plane
	// and RX afxdp take 1.
	Workers int
	Codecs  signaling.Codecs
	// NoRateAdaptation: every receiver gets every layer of every stream
	// (by default each receiver's AV1 temporal layers follow its estimate).
	NoRateAdaptation bool
	// PublisherStartKbps, if set, is the uplink estimate a publisher's
	// Chromium is told to start from (x-google-start-bitrate in the
	// answer); 0, the default, leaves the browser's own (300 kbit/s).
	// (An application-limited encoder's estimate stays where its first
	// probes put it: docs/sfu.md, "A simulcast publisher whose uplink
	// estimate never moved".)
	PublisherStartKbps int
	// LastN, if set, gives each receiver video from its LastN most recent
	// speakers only (the others paused, audio always): a room of n costs
	// about n x LastN video replicas, not n squared.
	LastN int
	// MetricsListen, if set, serves Prometheus metrics (ebrtc_sfu_*) at
	// http://MetricsListen/metrics.
	MetricsListen string
	// MetricsLabels: "none" (the default: rate control's series summed
	// over receivers) or "receiver" (a series per sender and receiver).
	MetricsLabels string
	// AdminListen, if set, serves the admin endpoint (ebrtc top; package admin).
	AdminListen string
	// Access: who may join (tokens, or open rooms) and how often from
	// one address (package access).
	Access access.Config
	// AllowedOrigins are other sites whose pages may open signaling
	// (web.Options).
	AllowedOrigins []string
	// MaxRooms and MaxParticipants bound the rooms and each room's
	// participants (0: 1,000 and 500).
	MaxRooms, MaxParticipants int
	// TURN, if it has URLs, is handed to every participant as it joins:
	// short-lived credentials for TURN servers sharing the secret (a
	// participant whose network blocks UDP joins through one).
	TURN TURN
	Log  *slog.Logger
	// AckLog, if set, gets every transport-wide ack the receivers' links
	// take (ratecontrol.AckLog: for looking into rate control; tests
	// record one).
	AckLog *ratecontrol.AckLog
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
	if err := c.TURN.validate(); err != nil {
		return err
	}
	if c.PublisherStartKbps != 0 && (c.PublisherStartKbps < 100 || c.PublisherStartKbps > 10000) {
		return fmt.Errorf("sfu: publisher-start-kbps: %d kbit/s: want 100 to 10000, or 0 (the browser's own)", c.PublisherStartKbps)
	}
	if c.LastN < 0 {
		return fmt.Errorf("sfu: last-n %d: want 0 (every speaker's video) or more", c.LastN)
	}
	if c.LastN > 0 && c.NoRateAdaptation {
		return errors.New("sfu: last-n: needs rate adaptation (the data plane pauses video it adapts by its dependency descriptor), not --no-rate-adaptation")
	}
	if c.Dataplane == "" {
		c.Dataplane = map[bool]string{true: "ebpf", false: "user"}[c.Unencrypted]
	}
	switch c.Dataplane {
	case "ebpf":
		if !c.Unencrypted {
			return errors.New("sfu: dataplane: the eBPF data plane forwards plain RTP only; encrypted media (the default) runs on the user data plane (--dataplane user), or say --unencrypted-media")
		}
		if len(c.Ifaces) == 0 {
			return errors.New("sfu: iface: the eBPF data plane needs the interfaces media arrives on")
		}
	case "user":
	default:
		return fmt.Errorf("sfu: dataplane: %q (want ebpf or user)", c.Dataplane)
	}
	switch c.RX {
	case "", "kernel":
		if c.Dataplane == "user" && len(c.Ifaces) > 0 {
			return errors.New("sfu: iface: names where the eBPF data plane or AF_XDP (--rx afxdp) runs; the user data plane on kernel sockets takes none")
		}
	case "afxdp":
		if c.Dataplane != "user" {
			return errors.New("sfu: rx: afxdp needs the user data plane (the eBPF one forwards in the kernel)")
		}
	default:
		return fmt.Errorf("sfu: rx: %q (want kernel or afxdp)", c.RX)
	}
	switch {
	case c.Workers < 0 || c.Workers > maxWorkers:
		return fmt.Errorf("sfu: workers: %d (want 0 for one per CPU up to %d, or 1 to %d)", c.Workers, defaultMaxWorkers, maxWorkers)
	case c.Workers > 1 && (c.Dataplane != "user" || c.RX == "afxdp"):
		return errors.New("sfu: workers: only the user data plane on kernel sockets has workers (the eBPF data plane forwards in the kernel; AF_XDP reads its queues itself)")
	}
	for _, o := range c.AllowedOrigins {
		if _, err := path.Match(o, ""); err != nil || o == "" {
			return fmt.Errorf("sfu: allowed-origin: %q is not a host or origin pattern (e.g. meet.example.com, *.example.com, https://example.com)", o)
		}
	}
	if c.MaxRooms < 0 || c.MaxParticipants < 0 {
		return errors.New("sfu: max-rooms, max-participants: want positive numbers (0: the defaults)")
	}
	switch c.MetricsLabels {
	case "", "none", "receiver":
	default:
		return fmt.Errorf("sfu: metrics-labels: %q (want none or receiver)", c.MetricsLabels)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Run serves until ctx ends, then removes everything it installed. The
// pieces are made in the order they need each other, none told of
// another later: the media sockets; ICE and the routes from receivers'
// addresses to their legs; the agent over both; the data plane, which
// reads the sockets and hands the agent what is its; the legs over the
// data plane; the controller over ICE and the legs.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	gate, err := access.New(cfg.Access)
	if err != nil {
		return fmt.Errorf("sfu: %w", err)
	}
	cert, err := cfg.Web.Load()
	if err != nil {
		return fmt.Errorf("sfu: %w", err)
	}
	sockets, err := openMedia(cfg)
	if err != nil {
		return err
	}
	ice, routes := agent.NewICE(agent.ICEConfig{}), leg.NewRoutes()
	var id *secure.Identity
	var transports *secure.Transports
	var dtls agent.DTLS
	if !cfg.Unencrypted {
		if id, err = secure.NewIdentity(); err != nil {
			sockets.close()
			return err
		}
		transports = secure.NewTransports(ice.SessionAt)
		defer transports.Close()
		dtls = transports
	}
	ag, err := agent.New(ice, routes, dtls)
	if err != nil {
		sockets.close()
		return err
	}
	upcall := func(p []byte, from netip.AddrPort, c *net.UDPConn) {
		if err := ag.Handle(p, from, c); err != nil {
			cfg.Log.Debug("agent", "err", err)
		}
	}
	plane, err := openPlane(cfg, sockets, upcall) // owns the sockets from here on
	if err != nil {
		return err
	}
	defer plane.Close()
	var ctrl *controller.Controller // (the table tells it of speakers; it needs the table)
	legs, err := leg.NewTable(leg.Config{Plane: plane, Routes: routes, Adapt: !cfg.NoRateAdaptation, Log: cfg.Log, AckLog: cfg.AckLog,
		LastN: cfg.LastN, OnSpeaker: func(room, stream string) { ctrl.Speaker(room, stream) }})
	if err != nil {
		return err
	}
	ctrlCfg := controller.Config{Codecs: cfg.Codecs, Media: cfg.Media, ICE: ice, Legs: legs, Adapt: !cfg.NoRateAdaptation, PublisherStartKbps: cfg.PublisherStartKbps,
		MaxRooms: cfg.MaxRooms, MaxParticipants: cfg.MaxParticipants, ICEServers: cfg.TURN.servers, Simulcast: !cfg.NoRateAdaptation}
	if id != nil {
		ctrlCfg.Security = &controller.Security{Identity: id, Transports: transports, Protect: plane.(*dataplane.User).Protect, Unprotect: plane.(*dataplane.User).Unprotect, Send: plane.Send,
			Failed: func(room, participant string, err error) {
				cfg.Log.Info("DTLS handshake failed", "room", room, "participant", participant, "err", err)
			}}
		cfg.Log.Info("media encrypted (DTLS-SRTP)", "fingerprint", id.Fingerprint().String())
	}
	if ctrl, err = controller.New(ctrlCfg); err != nil {
		return err
	}
	if cfg.MetricsListen != "" {
		m, err := metrics.Serve(cfg.MetricsListen, NewCollector(cfg.Dataplane, plane, ctrl), afxdp.NewCollector(sockets.rx),
			leg.NewCollector(legs, cfg.MetricsLabels), gate)
		if err != nil {
			return fmt.Errorf("sfu: %w", err)
		}
		defer m.Close()
	}
	if cfg.AdminListen != "" {
		a, err := admin.Serve(cfg.AdminListen, func() admin.Status { return status(ctrl, plane, legs) })
		if err != nil {
			return fmt.Errorf("sfu: admin-listen: %w", err)
		}
		defer a.Close()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("sfu: listen: %w", err)
	}
	go legs.Run(ctx)
	go housekeeping(ctx, ctrl, ice)
	srv := &http.Server{Handler: web.Handler(ctrl, web.Options{Gate: gate, AllowedOrigins: cfg.AllowedOrigins}), ReadHeaderTimeout: 10 * time.Second, TLSConfig: cert.Config}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	scheme := "http"
	if cert.Config != nil {
		scheme = "https"
		cfg.Log.Info("web certificate", "sha256", cert.Fingerprint, "self_signed_made_now", cert.Made, "file", cert.File)
	}
	cfg.Log.Info("sfu serving", "web", scheme+"://"+ln.Addr().String()+"/", "media", cfg.Media, "dataplane", cfg.Dataplane, "workers", cfg.workers(), "encrypted", !cfg.Unencrypted)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr(), plane)
	}
	serve := srv.Serve
	if cert.Config != nil {
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Workers' bounds: each reader keeps a batch of receive buffers and a
// fanout's replica buffers (about 2.5 MiB), so the default stops at 8 and
// no more than 64 are taken.
const (
	defaultMaxWorkers = 8
	maxWorkers        = 64
)

// workers is how many sockets each media address gets (Config.Workers).
func (c *Config) workers() int {
	switch {
	case c.Dataplane != "user" || c.RX == "afxdp":
		return 1
	case c.Workers == 0:
		return min(runtime.GOMAXPROCS(0), defaultMaxWorkers)
	}
	return c.Workers
}

// media is the SFU's media sockets: one per address (conns); with --rx
// afxdp each is the kernel socket of an AF_XDP conn (rx) that receives in
// its place, and otherwise each leads an SO_REUSEPORT group whose other
// sockets the user plane's workers read.
type media struct {
	conns   []*net.UDPConn
	rx      []*afxdp.Conn
	workers map[*net.UDPConn][]*net.UDPConn
}

func (m *media) close() {
	if len(m.rx) > 0 {
		for _, c := range m.rx {
			c.Close() // and its kernel socket, in conns
		}
	} else {
		for _, c := range m.conns {
			c.Close()
		}
	}
	for _, ws := range m.workers {
		for _, w := range ws {
			w.Close()
		}
	}
}

// openMedia opens the media sockets; on failure it closes those it opened.
func openMedia(cfg Config) (*media, error) {
	m := &media{workers: map[*net.UDPConn][]*net.UDPConn{}}
	for _, addr := range cfg.Media {
		if cfg.RX == "afxdp" {
			lc := afxdp.ListenConfig{Interfaces: cfg.Ifaces}
			c, err := lc.ListenPacket(context.Background(), "udp", addr.String())
			if err != nil {
				m.close()
				return nil, fmt.Errorf("sfu: media socket (rx afxdp): %w", err)
			}
			m.rx, m.conns = append(m.rx, c), append(m.conns, c.KernelConn())
			continue
		}
		group, err := dataplane.ListenGroup(addr, cfg.workers())
		if err != nil {
			m.close()
			return nil, fmt.Errorf("sfu: media socket: %w", err)
		}
		m.conns, m.workers[group[0]] = append(m.conns, group[0]), group[1:]
	}
	return m, nil
}

// openPlane makes the data plane on the media sockets: it reads them and
// closes them; a failure closes them too.
func openPlane(cfg Config, m *media, upcall func([]byte, netip.AddrPort, *net.UDPConn)) (dataplane.Plane, error) {
	if cfg.Dataplane == "user" {
		readers := map[*net.UDPConn]dataplane.DatagramConn{}
		for i, c := range m.rx {
			readers[m.conns[i]] = c
		}
		u, err := dataplane.NewUser(dataplane.UserConfig{Conns: m.conns, Readers: readers, Workers: m.workers, Upcall: upcall,
			Encrypted: !cfg.Unencrypted})
		if err != nil {
			m.close()
		}
		return u, err
	}
	d, err := dataplane.Load(dataplane.Config{Media: cfg.Media, Conns: m.conns, Upcall: upcall})
	if err != nil {
		m.close()
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

// housekeeping checks consent every second (RFC 7675).
func housekeeping(ctx context.Context, ctrl *controller.Controller, ice *agent.ICE) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if gone := ice.Expire(); len(gone) > 0 {
				ctrl.Expired(gone)
			}
		}
	}
}

// status is the SFU's snapshot for the admin endpoint: its rooms, with
// what each publisher sent into the data plane, the copies sent on and
// what its layers carry, and every leg's state.
func status(ctrl *controller.Controller, plane dataplane.Plane, legs *leg.Table) admin.Status {
	st := admin.Status{Server: "sfu", Pid: os.Getpid(), Time: time.Now(), Rooms: ctrl.Snapshot()}
	layers := map[string]leg.SenderStatus{}
	for _, s := range legs.Senders() {
		layers[s.Room+"/"+s.ID] = s
	}
	for _, room := range st.Rooms {
		for i, p := range room.Participants {
			if !p.Publishes.IsValid() {
				continue
			}
			ss, err := plane.StreamStats(p.Publishes)
			if err != nil {
				continue
			}
			ap := &room.Participants[i]
			ap.Sent = admin.Counter{Packets: ss.In.Packets, Bytes: ss.In.Bytes}
			for _, out := range ss.Out {
				ap.Forwarded = ap.Forwarded.Add(admin.Counter{Packets: out.Packets, Bytes: out.Bytes})
			}
			if l, ok := layers[room.Name+"/"+p.ID]; ok {
				ap.LayerBPS, ap.OtherBPS = l.LayerBPS, l.OtherBPS
			}
		}
	}
	for _, l := range legs.Status() {
		r := l.Retransmissions
		st.Legs = append(st.Legs, admin.Leg{Room: l.Room, Sender: l.Sender, Receiver: l.Receiver, Target: leg.TargetName(l.Target),
			Reason: l.Reason, EstimateBPS: l.Estimate, EstimateSource: l.EstimateSource,
			Sent: admin.Counter{Packets: l.Sent.Packets, Bytes: l.Sent.Bytes}, Frames: l.Sent.Frames,
			Retransmitted: r.Sent, Doubled: r.Doubled, AskedSender: r.Asked, NotSent: r.NotOwed + r.Repeated + r.Superseded, TWCC: l.TWCC, RTX: l.RTX})
	}
	return st
}
