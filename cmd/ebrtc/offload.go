package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/snoop"
)

type listValue []string

func (l *listValue) String() string     { return strings.Join(*l, ",") }
func (l *listValue) Set(v string) error { *l = append(*l, v); return nil }

func runOffload(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runOffloadStatus(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "remove" {
		return runOffloadRemove(args[1:], stdout, stderr)
	}
	fs := newFlags("offload", stderr)
	var ifaces, relayIfaces, ports, relayIPs, relayMap listValue
	fs.Var(&ifaces, "iface", "client-facing interface: XDP fast path and TC egress snooper (repeatable, required)")
	fs.Var(&relayIfaces, "relay-iface", "peer-facing interface, if different (repeatable)")
	fs.Var(&ports, "listen-port", "the TURN server's UDP port (repeatable; default 3478)")
	fs.Var(&relayIPs, "relay-ip", "the TURN server's relay address (repeatable; lets two of its clients hairpin in XDP)")
	fs.Var(&relayMap, "relay-map", "ADVERTISED=WIRE: the server advertises relay address ADVERTISED but binds WIRE (1:1 NAT) (repeatable)")
	minPort := fs.Int("min-port", 49152, "lowest relay port of the TURN server")
	maxPort := fs.Int("max-port", 65535, "highest relay port of the TURN server")
	mode := fs.String("offload", "auto", "fast path hooks: auto (XDP where the interface and its neighbours take XDP frames, TC ingress elsewhere), xdp or tc")
	forwarding := fs.String("offload-forwarding", "auto", "auto: turn on loopback's forwarding sysctls (route lookups only; no interface forwards) while running; manual: require them")
	metricsListen := fs.String("metrics-listen", "", "Prometheus endpoint IP:PORT")
	control := fs.String("control-socket", snoop.DefaultControlSocket, "Unix socket answering 'ebrtc offload status' (empty: none)")
	adminListen := fs.String("admin-listen", "", "admin endpoint for 'ebrtc top': unix:PATH or a loopback IP:PORT (empty: off)")
	pinDir := fs.String("pin-dir", snoop.DefaultPinDir, "bpffs directory keeping the fast path running across restarts (empty: detach on exit)")
	stateFile := fs.String("state-file", snoop.DefaultStateFile, "learned allocations and channels, for restarts")
	newLog := logFlags(fs)
	spill := fs.String("spill", "1/1000", "hand the server one packet per channel in N (1/N) or one per interval (e.g. 1s); 'off' for none")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc offload --iface IFACE [flags]\n       ebrtc offload status [--control-socket PATH]\n       ebrtc offload remove [--pin-dir DIR] [--state-file FILE]\n\nOffloads the UDP channels of an unmodified TURN server on this host (coturn, say)\nto the XDP fast path, learning them from its control traffic. Needs root.\n\nFlags:")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if len(ifaces) == 0 {
		fmt.Fprintln(stderr, "ebrtc offload: iface: at least one --iface is required")
		return 2
	}
	hooks, err := offload.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc offload: offload: %v\n", err)
		return 2
	}
	logger, err := newLog(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc offload: %v\n", err)
		return 2
	}
	cfg := snoop.Config{Log: logger, Mode: hooks, Ifaces: ifaces, RelayIfaces: relayIfaces, MinPort: uint16(*minPort), MaxPort: uint16(*maxPort),
		ManageForwarding: *forwarding == "auto", MetricsListen: *metricsListen, ControlSocket: *control, AdminListen: *adminListen,
		PinDir: *pinDir, StateFile: *stateFile}
	if len(ports) == 0 {
		ports = listValue{"3478"}
	}
	for _, p := range ports {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			fmt.Fprintf(stderr, "ebrtc offload: listen-port: %q is not a port\n", p)
			return 2
		}
		cfg.ListenPorts = append(cfg.ListenPorts, uint16(n))
	}
	for _, a := range relayIPs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			fmt.Fprintf(stderr, "ebrtc offload: relay-ip: %q is not an IP address\n", a)
			return 2
		}
		cfg.RelayIPs = append(cfg.RelayIPs, ip)
	}
	for _, m := range relayMap {
		ext, wire, ok := strings.Cut(m, "=")
		a, err1 := netip.ParseAddr(ext)
		b, err2 := netip.ParseAddr(wire)
		if !ok || err1 != nil || err2 != nil || a.Is4() != b.Is4() {
			fmt.Fprintf(stderr, "ebrtc offload: relay-map: %q is not ADVERTISED=WIRE of one family\n", m)
			return 2
		}
		if cfg.RelayMap == nil {
			cfg.RelayMap = map[netip.Addr]netip.Addr{}
		}
		cfg.RelayMap[a] = b
		cfg.RelayIPs = append(cfg.RelayIPs, b) // the wire address is a relay address of ours
	}
	if *minPort < 1 || *maxPort > 65535 || *minPort > *maxPort {
		fmt.Fprintln(stderr, "ebrtc offload: min-port: the relay port range is empty or out of 1-65535")
		return 2
	}
	if *forwarding != "auto" && *forwarding != "manual" {
		fmt.Fprintf(stderr, "ebrtc offload: offload-forwarding: %q is not auto or manual\n", *forwarding)
		return 2
	}
	if err := parseSpill(*spill, &cfg); err != nil {
		fmt.Fprintf(stderr, "ebrtc offload: spill: %v\n", err)
		return 2
	}
	svc, err := snoop.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc offload: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "offloading UDP channels of the TURN server on ports %v via %v\nready\n", cfg.ListenPorts, append(ifaces, relayIfaces...))
	untilSignal(stderr, func(ctx context.Context) { <-ctx.Done() })
	if err := svc.Close(); err != nil {
		fmt.Fprintf(stderr, "ebrtc offload: shutdown: %v\n", err)
		return 1
	}
	return 0
}

// parseSpill reads "1/N", a duration, or "off".
func parseSpill(v string, cfg *snoop.Config) error {
	if v == "off" {
		return nil
	}
	if n, ok := strings.CutPrefix(v, "1/"); ok {
		every, err := strconv.ParseUint(n, 10, 32)
		if err != nil || every < 2 {
			return fmt.Errorf("%q: want 1/N with N >= 2", v)
		}
		cfg.SpillEvery = uint32(every)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return fmt.Errorf("%q is not 1/N, a duration of at least 1ms, or off", v)
	}
	cfg.SpillInterval = d
	return nil
}

func runOffloadStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("offload status", stderr)
	control := fs.String("control-socket", snoop.DefaultControlSocket, "the running ebrtc offload's control socket")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	out, err := snoop.Status(*control)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc offload status: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, out)
	return 0
}

func runOffloadRemove(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("offload remove", stderr)
	pinDir := fs.String("pin-dir", snoop.DefaultPinDir, "the pin directory of ebrtc offload")
	stateFile := fs.String("state-file", snoop.DefaultStateFile, "its state file")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if err := snoop.Remove(*pinDir, *stateFile); err != nil {
		fmt.Fprintf(stderr, "ebrtc offload remove: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "fast path removed: the TURN server relays everything itself")
	return 0
}
