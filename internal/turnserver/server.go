// Package turnserver is `ebrtc turn`: an RFC 8656 TURN server on pion/turn
// whose UDP channels are relayed by the XDP fast path of package offload.
package turnserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/logs"
	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/sockopt"
	"github.com/ebrtc/ebrtc/internal/sourceguard"
	"github.com/ebrtc/ebrtc/internal/turnserver/restart"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// Server is a running `ebrtc turn`.
type Server struct {
	settings   *Settings
	log        logging.LeveledLogger
	turn       *turn.Server
	engine     *offload.Engine    // nil when the fast path is off or could not attach
	guard      *sourceguard.Guard // nil when it could not load (no CAP_BPF)
	allocs     *allocationCounter
	slow       *slowStats
	events     *metrics.Events
	metrics    *http.Server
	admin      io.Closer            // the admin endpoint (nil: off)
	Attached   []offload.Attachment // where the fast path runs, and why
	afxdpConns []*afxdp.Conn        // UDP listeners receiving through AF_XDP (--rx afxdp)
	stop       chan struct{}        // ends watchAttachments
	gen        *relayGenerator
	table      *channelTable
	restart    *restart.Lifecycle // hand-overs and keep-offload: the listening sockets, the read gate
}

// Start opens the listeners, loads and attaches the fast path, and serves.
func Start(s *Settings) (*Server, error) {
	logger, err := logs.New(os.Stderr, s.LogFormat, s.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// pion logs some refusals per datagram at info (a datagram from a peer
	// without permission): a flood would flood the log. Counters show them.
	lf := logs.PionFactory(logger, "turn")
	events := metrics.NewEvents()
	srv := &Server{
		settings: s,
		log:      lf.NewLogger("ebrtc"),
		allocs:   newAllocationCounter(quotas{user: s.UserQuota, perSource: s.UserQuotaScope == "source", total: s.TotalQuota}, newIPRateLimiter(s.AllocateRate, 3*s.AllocateRate), events),
		slow:     &slowStats{},
		events:   events,
	}
	if len(s.RelayIPs) == 0 {
		ips, err := guessRelayIPs(s.Listeners)
		if err != nil {
			return nil, fmt.Errorf("config: relay-ip: %v", err)
		}
		s.RelayIPs = ips
		s.Policy, _ = NewPeerPolicy(s.AllowPeers, s.DenyPeers, append(slices.Clone(ips), s.ExternalIPs...))
	}
	// The peer policy needs to know which addresses are this host's.
	if err := hostAddresses.Refresh(); err != nil {
		return nil, err
	}
	if g, err := sourceguard.Load(); err != nil {
		srv.log.Warnf("IPv6 datagrams spoofed from this host's own addresses will reach the server: %v", err)
	} else {
		srv.guard = g
	}
	srv.restart = restart.New(restart.Config{
		Offload: s.Offload != "off", KeepOffload: s.KeepOffload, PinDir: s.PinDir, StateFile: s.StateFile,
		OffloadConfig: s.offloadConfig, Guard: srv.guardControl(), Log: srv.log,
	}, restartHost{srv})
	if err := srv.restart.Inherit(); err != nil {
		_ = srv.Close()
		return nil, err
	}
	if err := srv.start(lf); err != nil {
		srv.restart.StartFailed(err, srv.Close)
		return nil, err
	}
	srv.restart.Serving()
	return srv, nil
}

func (srv *Server) start(lf logging.LoggerFactory) error {
	s := srv.settings
	gen := &relayGenerator{
		relayIPs: s.RelayIPs, externalIPs: s.ExternalIPs, minPort: s.MinPort, maxPort: s.MaxPort,
		policy: s.Policy, limit: s.RateLimit, stats: srv.slow, events: srv.events, guard: srv.guardControl(),
		gate: srv.restart.Gate(),
	}
	table := &channelTable{
		sink:         discardSink{},
		udpListeners: map[netip.AddrPort]bool{},
		toWire:       gen.toWire,
		peerAllowed:  func(peer netip.AddrPort) bool { return gen.peerAllowed(peer, false) },
		serverFor:    serverAddressFor,
		retired:      srv.retireChannel,
		log:          srv.log,
		allocations:  map[allocKey]*allocState{},
	}
	srv.gen, srv.table = gen, table
	permit := func(client net.Addr, peer net.IP) bool {
		ip, _ := netip.AddrFromSlice(peer)
		if !s.Policy.Allowed(ip) {
			srv.log.Debugf("peer %v refused for %v by the peer policy", peer, client)
			return false
		}
		return true
	}

	authFailed := func(reason string) { srv.events.AuthFailures.WithLabelValues(reason).Inc() }
	events := table.eventHandler(srv.allocs, gen.permission)
	events.OnAuth = func(src, dst net.Addr, protocol, username, realm, method string, ok bool) {
		if !ok {
			authFailed("bad_integrity")
		}
	}
	cfg := turn.ServerConfig{
		Realm:         s.Realm,
		AuthHandler:   authHandler(s.Users, s.AuthSecret, s.Realm, time.Now, srv.log, authFailed),
		QuotaHandler:  srv.allocs.quotaHandler(),
		EventHandler:  events,
		LoggerFactory: lf,

		ChannelBindTimeout: s.ChannelLifetime,
		PermissionTimeout:  s.PermissionLifetime,
		NonceLifetime:      s.StaleNonce,
	}
	cfg.AlternateServerHandler = srv.alternateHandler() // shed-above-allocations (loadshed.go)
	cfg.NonceKey = fleetNonceKey(s)
	for _, l := range s.Listeners {
		if err := srv.addListener(&cfg, l, gen, permit, table); err != nil {
			return err
		}
	}

	if s.Offload != "off" {
		if engine, err := srv.startOffload(table); err != nil {
			srv.log.Warnf("fast path off, relaying in user space: %v", err)
		} else {
			srv.engine = engine
			table.sink = engine
			srv.stop = make(chan struct{})
			go srv.watchAttachments(srv.stop)
		}
	}

	t, err := turn.NewServer(cfg)
	if err != nil {
		return fmt.Errorf("turn: %w", err)
	}
	srv.turn = t
	srv.restart.TakeOver()
	if s.MetricsListen != "" {
		if err := srv.serveMetrics(); err != nil {
			return err
		}
	}
	return srv.serveAdmin()
}

// serveAdmin serves the admin endpoint (ebrtc top), if configured.
func (srv *Server) serveAdmin() error {
	if srv.settings.AdminListen == "" {
		return nil
	}
	a, err := admin.Serve(srv.settings.AdminListen, srv.Status)
	if err != nil {
		return fmt.Errorf("config: admin-listen: %w", err)
	}
	srv.admin = a
	return nil
}

type permitFunc = func(net.Addr, net.IP) bool

func (srv *Server) addListener(cfg *turn.ServerConfig, l Listener, gen *relayGenerator, permit permitFunc, table *channelTable) error {
	s := srv.settings
	network := "4"
	if l.Addr.Addr().Is6() {
		network = "6"
	}
	addr := l.Addr.String()
	switch l.Scheme {
	case "udp":
		// Several sockets on one port spread the slow path over the cores.
		if s.RX == "afxdp" {
			return srv.addAFXDPListener(cfg, network, addr, gen, permit, table)
		}
		conns, err := srv.restart.ListenUDP(network, l.Addr, s.UDPThreads)
		if err != nil {
			return err
		}
		for _, conn := range conns {
			cfg.PacketConnConfigs = append(cfg.PacketConnConfigs, turn.PacketConnConfig{
				PacketConn:            &screenedConn{PacketConn: conn, events: srv.events, reader: srv.restart.Gate().Reader()},
				RelayAddressGenerator: gen, PermissionHandler: permit,
			})
			table.udpListeners[addrPort(conn.LocalAddr())] = true
		}
	case "tcp", "tls":
		tcp, err := srv.restart.ListenTCP(l.Scheme, network, l.Addr)
		if err != nil {
			return err
		}
		var ln net.Listener = tcp
		if l.Scheme == "tls" {
			cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
			if err != nil {
				ln.Close()
				return fmt.Errorf("config: tls-cert: %w", err)
			}
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		}
		cfg.ListenerConfigs = append(cfg.ListenerConfigs, turn.ListenerConfig{
			Listener: &screenedListener{Listener: ln, events: srv.events, gate: srv.restart.Gate()}, RelayAddressGenerator: gen, PermissionHandler: permit})
	case "dtls":
		cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
		if err != nil {
			return fmt.Errorf("config: tls-cert: %w", err)
		}
		ln, err := dtls.Listen("udp"+network, net.UDPAddrFromAddrPort(l.Addr), &dtls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			return fmt.Errorf("listen %s: %w", l.Scheme+"://"+addr, err)
		}
		srv.restart.AddDTLS(ln)
		cfg.ListenerConfigs = append(cfg.ListenerConfigs, turn.ListenerConfig{
			Listener: &screenedListener{Listener: ln, events: srv.events}, RelayAddressGenerator: gen, PermissionHandler: permit})
	}
	return nil
}

// guardControl attaches the source guard to a socket, if it loaded.
func (srv *Server) guardControl() sockopt.Control {
	if srv.guard == nil {
		return nil
	}
	return srv.guard.Control
}

// addAFXDPListener receives a UDP listener's datagrams through AF_XDP
// (pkg/afxdp): one conn and one read loop, whatever --udp-threads says.
// pion/turn keeps allocations per PacketConnConfig, so several loops on one
// conn would each see part of a client's datagrams and drop what belongs
// to another's allocations; SO_REUSEPORT avoids that by hashing a client
// to one socket, which one conn per port cannot.
func (srv *Server) addAFXDPListener(cfg *turn.ServerConfig, network, addr string, gen *relayGenerator, permit permitFunc, table *channelTable) error {
	lc := afxdp.ListenConfig{Control: sockopt.ControlWith(sockopt.UDPBuffers, srv.guardControl())}
	conn, err := lc.ListenPacket(context.Background(), "udp"+network, addr)
	if err != nil {
		return fmt.Errorf("listen udp://%s (rx afxdp): %w", addr, err)
	}
	srv.afxdpConns = append(srv.afxdpConns, conn)
	cfg.PacketConnConfigs = append(cfg.PacketConnConfigs, turn.PacketConnConfig{
		PacketConn: &screenedConn{PacketConn: conn, events: srv.events}, RelayAddressGenerator: gen, PermissionHandler: permit,
	})
	srv.restart.AddAFXDP(addrPort(conn.LocalAddr()))
	table.udpListeners[addrPort(conn.LocalAddr())] = true
	return nil
}

func (srv *Server) startOffload(table *channelTable) (*offload.Engine, error) {
	s := srv.settings
	engine, err := srv.restart.LoadEngine()
	if err != nil {
		return nil, err
	}
	ifaces := s.OffloadIfaces
	if len(ifaces) == 0 {
		if ifaces, err = defaultOffloadIfaces(s); err != nil {
			engine.Close()
			return nil, err
		}
	}
	mode, _ := offload.ParseMode(s.Offload) // checked with the config
	for _, name := range ifaces {
		a, err := engine.Attach(name, mode, s.OffloadForwarding == "auto")
		if err != nil {
			engine.Close()
			return nil, err
		}
		srv.Attached = append(srv.Attached, a)
		srv.log.Infof("fast path on %s: %s (%s)", name, a.Hooks(), a.Reason)
	}
	srv.restart.SettlePins(engine)
	return engine, nil
}

// udpPorts are the ports of the UDP listeners, which the fast path serves.
func (s *Settings) udpPorts() []uint16 {
	var ports []uint16
	for _, l := range s.Listeners {
		if l.Scheme == "udp" && !slices.Contains(ports, l.Addr.Port()) {
			ports = append(ports, l.Addr.Port())
		}
	}
	return ports
}

// offloadConfig is the fast path's configuration, on maps pinned in pinDir.
func (s *Settings) offloadConfig(pinDir string) (offload.Config, error) {
	ports := s.udpPorts()
	if len(ports) == 0 {
		return offload.Config{}, errors.New("no UDP listener to offload")
	}
	return offload.Config{ListenPorts: ports, RelayPortMin: uint16(s.MinPort), RelayPortMax: uint16(s.MaxPort),
		RelayIPs: s.RelayIPs, RateLimit: s.RateLimit, PinDir: pinDir}, nil
}

// defaultOffloadIfaces are the interfaces carrying the relay addresses and
// the listening addresses (all non-loopback interfaces for a wildcard).
func defaultOffloadIfaces(s *Settings) ([]string, error) {
	want := slices.Clone(s.RelayIPs)
	wildcard := false
	for _, l := range s.Listeners {
		if l.Addr.Addr().IsUnspecified() {
			wildcard = true
		} else {
			want = append(want, l.Addr.Addr())
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err == nil && (wildcard || slices.Contains(want, pfx.Addr().Unmap())) {
				out = append(out, ifc.Name)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no interface carries the relay or listening addresses; set offload-iface")
	}
	return out, nil
}

// serverAddressFor is the address a client's datagrams leave from: the
// listener's own address, or for a wildcard listener the source address the
// kernel picks towards the client (what a reply from the wildcard socket gets).
func serverAddressFor(listener, client netip.AddrPort) (netip.AddrPort, error) {
	if !listener.Addr().IsUnspecified() {
		return listener, nil
	}
	// Connecting a UDP socket only consults the routing table; nothing is sent.
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(client))
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	local := addrPort(c.LocalAddr())
	return netip.AddrPortFrom(local.Addr(), listener.Port()), nil
}

// guessRelayIPs uses the listeners' specific addresses when no relay-ip is set.
func guessRelayIPs(listeners []Listener) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, l := range listeners {
		a := l.Addr.Addr()
		if !a.IsUnspecified() && !slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("listeners are wildcards: set relay-ip to the address relays bind to")
	}
	return out, nil
}

func (srv *Server) serveMetrics() error {
	var guardDropped func() (uint64, error)
	if srv.guard != nil {
		guardDropped = srv.guard.Dropped
	}
	cs := append(srv.events.Collectors(),
		offload.NewCollector(srv.engine, srv.slowCounters, srv.allocs.counts), metrics.NewSourceGuardCollector(guardDropped),
		metrics.NewSocketDropsCollector(srv.socketKind), afxdp.NewCollector(srv.afxdpConns))
	if labels := srv.settings.MetricsLabels; labels != "none" {
		cs = append(cs, admin.NewUserCollector(srv.Status, labels == "allocation"))
	}
	m, err := metrics.Serve(srv.settings.MetricsListen, cs...)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	srv.metrics = m
	return nil
}

// socketKind tells the server's UDP sockets apart by local port.
func (srv *Server) socketKind(port uint16) string {
	s := srv.settings
	switch {
	case int(port) >= s.MinPort && int(port) <= s.MaxPort:
		return "relay"
	case slices.ContainsFunc(s.Listeners, func(l Listener) bool { return l.Addr.Port() == port }):
		return "listener"
	}
	return ""
}

func (srv *Server) slowCounters() (toPeer, toClient offload.Counter) {
	load := func(c *counter) offload.Counter {
		return offload.Counter{Packets: c.packets.Load(), Bytes: c.bytes.Load()}
	}
	return load(&srv.slow.toPeer), load(&srv.slow.toClient)
}

// Describe summarises what is running, for the log and `ebrtc turn` output.
func (srv *Server) Describe() string {
	var b strings.Builder
	for _, l := range srv.settings.Listeners {
		fmt.Fprintf(&b, "listening %s://%s\n", l.Scheme, l.Addr)
	}
	fmt.Fprintf(&b, "relay addresses %v ports %d-%d\n", srv.settings.RelayIPs, srv.settings.MinPort, srv.settings.MaxPort)
	if srv.engine == nil {
		b.WriteString("fast path: off (user space only)\n")
	}
	for _, a := range srv.Attached {
		fmt.Fprintf(&b, "fast path: %s on %s (%s)\n", a.Hooks(), a.Iface, a.Reason)
	}
	return b.String()
}

// watchAttachments logs an interface that stops being an XDP egress (the
// data plane moves its datagrams off XDP by itself; this says so).
func (srv *Server) watchAttachments(stop <-chan struct{}) {
	said := map[string]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, a := range srv.engine.Attachments() {
			if a.XDP && !a.XDPEgress && !said[a.Iface] {
				said[a.Iface] = true
				srv.log.Warnf("fast path on %s: %s", a.Iface, a.Reason)
			}
		}
	}
}

// Upgrade hands everything to a new process of the binary at path (the
// same command line): on success this server has stopped serving and only
// Close is left; on failure it serves on.
func (srv *Server) Upgrade(path string, args []string, stdout, stderr io.Writer) error {
	return srv.restart.Upgrade(path, args, stdout, stderr)
}

// Close stops serving, detaches the fast path and closes every allocation.
func (srv *Server) Close() error {
	var errs []error
	if srv.turn != nil { // keep-offload saves pion's allocations first
		errs = append(errs, srv.restart.Stop())
	}
	if srv.stop != nil {
		close(srv.stop)
	}
	if srv.metrics != nil {
		errs = append(errs, srv.metrics.Close())
	}
	if srv.admin != nil {
		errs = append(errs, srv.admin.Close())
	}
	// Closing the allocations removes their channels from the maps; then detach.
	if srv.turn != nil {
		errs = append(errs, srv.turn.Close())
	}
	if srv.engine != nil {
		errs = append(errs, srv.engine.Close())
	}
	errs = append(errs, srv.restart.Close())
	for _, c := range srv.afxdpConns {
		if err := c.Close(); !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if srv.guard != nil {
		errs = append(errs, srv.guard.Close())
	}
	return errors.Join(errs...)
}

// discardSink stands in for the engine when the fast path is off.
type discardSink struct{}

func (discardSink) AddChannel(offload.Channel) error    { return nil }
func (discardSink) RemoveChannel(offload.Channel) error { return nil }
func (discardSink) ChannelStats(offload.Channel) (offload.FlowStats, offload.FlowStats, error) {
	return offload.FlowStats{}, offload.FlowStats{}, errors.New("fast path off")
}
