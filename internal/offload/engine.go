// Package offload loads the XDP ChannelData fast path (bpf/turn_offload.c),
// attaches it to interfaces and keeps its maps in step with the TURN channels
// that the control plane (ebrtc turn, or the snooper of ebrtc offload) reports.
package offload

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
	"github.com/ebrtc/ebrtc/internal/slots"
)

// Config configures the data plane.
type Config struct {
	// ListenPorts are the UDP ports TURN clients send ChannelData to.
	ListenPorts []uint16
	// RelayPortMin and RelayPortMax bound the relay (allocation) ports.
	RelayPortMin, RelayPortMax uint16
	// RelayIPs are this server's relay addresses on the wire; a channel whose
	// peer is one of them is relayed client-to-client entirely in XDP.
	RelayIPs []netip.Addr
	// MaxChannels sizes the maps (default 65536 per family and direction).
	MaxChannels uint32
	// Snoop copies TURN control messages to user space (see SnoopReader),
	// for learning channels of a TURN server that does not report them.
	Snoop bool
	// SpillEvery and SpillInterval hand a channel's packet to the server
	// every so many packets and/or at this interval (zero: never), so a
	// server that does not know about the fast path still sees its traffic.
	SpillEvery    uint32
	SpillInterval time.Duration
	// RateLimit caps each allocation's relayed data in each direction
	// (zero: no limit); see package ratelimit.
	RateLimit ratelimit.Limit
	// PinDir (on bpffs) keeps the maps and attachments across restarts: the
	// fast path goes on relaying while the process is away, and the next
	// Load picks its channels up again. Empty: everything ends with Close.
	PinDir string
	// DeferRestore leaves reading the channels of the pinned maps to
	// Restore: a process loads (and verifies) ahead of a hand-over, while
	// the maps are still its predecessor's to change.
	DeferRestore bool
}

func (c *Config) validate() error {
	if len(c.ListenPorts) == 0 || len(c.ListenPorts) > maxListenPorts {
		return fmt.Errorf("offload: listen ports: need 1 to %d, got %d", maxListenPorts, len(c.ListenPorts))
	}
	if c.RelayPortMin == 0 || c.RelayPortMin > c.RelayPortMax {
		return fmt.Errorf("offload: relay port range %d-%d is empty", c.RelayPortMin, c.RelayPortMax)
	}
	for _, p := range c.ListenPorts {
		if p >= c.RelayPortMin && p <= c.RelayPortMax {
			return fmt.Errorf("offload: listen port %d lies inside the relay port range", p)
		}
	}
	if c.RateLimit.Enabled() && c.RateLimit.Burst == 0 {
		return errors.New("offload: rate limit without a bucket depth")
	}
	return nil
}

const (
	maxListenPorts     = 8
	defaultMaxChannels = 65536
	configFlagSnoop    = 0x1 // CONFIG_F_SNOOP
)

// Engine owns the loaded BPF objects, their attachments and the channel table.
type Engine struct {
	objs  turnObjects
	tc    *ebpf.Program    // the TC build of the same program, on objs' maps
	snoop *ebpf.Program    // the egress snooper (bpf/turn_snoop.c), on objs' maps
	xmit  turnXmitPrograms // the XDP transmit tracepoints (bpf/turn_xmit.c), on objs' maps
	// their links: they count frames our egresses did not take
	watchers []link.Link

	mu           sync.Mutex
	attached     map[int]*attachment // by ifindex
	tcLinks      []link.Link         // TC egress snoopers
	forwardingOn bool                // the loopback forwarding sysctls (bpf/ip.h)
	ifaceSlots   slots.Pool          // xmit_pending slots of attached interfaces
	pinDir       string
	restores     []func() error // sysctls to put back on Close
	relayIPs     map[netip.Addr]bool
	channels     map[Channel]channelState
	slots        slots.Pool
	limit        ratelimit.Limit
	buckets      map[allocation]*allocBuckets
	bucketSlots  slots.Pool
	kconf        turnOffloadConfig // what Load wrote to the config map
}

// Load loads the program and its maps into the kernel. It attaches nothing.
func Load(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxChannels == 0 {
		cfg.MaxChannels = defaultMaxChannels
	}
	spec, err := loadTurn()
	if err != nil {
		return nil, fmt.Errorf("offload: read BPF object: %w", err)
	}
	for _, name := range []string{"client_routes_v4", "client_routes_v6", "peer_routes_v4", "peer_routes_v6"} {
		spec.Maps[name].MaxEntries = cfg.MaxChannels
	}
	spec.Maps["flows"].MaxEntries = 2 * cfg.MaxChannels
	spec.Maps["rate_buckets"].MaxEntries = 2 * cfg.MaxChannels

	e := &Engine{
		attached:    map[int]*attachment{},
		ifaceSlots:  slots.New(maxIfaceSlots),
		relayIPs:    map[netip.Addr]bool{},
		channels:    map[Channel]channelState{},
		slots:       slots.New(2 * cfg.MaxChannels),
		pinDir:      cfg.PinDir,
		buckets:     map[allocation]*allocBuckets{},
		bucketSlots: slots.New(2 * cfg.MaxChannels),
	}
	e.limit = cfg.RateLimit
	if err := e.load(spec); err != nil {
		return nil, err
	}
	if err := e.loadCompanions(); err != nil {
		e.closePrograms()
		return nil, err
	}
	if err := e.watchXmitFailures(); err != nil {
		e.closePrograms()
		return nil, err
	}
	for _, ip := range cfg.RelayIPs {
		e.relayIPs[ip.Unmap()] = true
	}
	e.kconf = kernelConfig(cfg)
	if err := e.objs.Config.Put(uint32(0), e.kconf); err != nil {
		e.Close()
		return nil, fmt.Errorf("offload: write config: %w", err)
	}
	if cfg.DeferRestore {
		return e, nil
	}
	if err := e.Restore(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Restore reads the channels a previous process left in the pinned maps
// (Load does, unless Config.DeferRestore).
func (e *Engine) Restore() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.restoreChannels()
}

// pinnedMaps keep the fast path's state across restarts (not the capture
// buffer, which belongs to one reader, nor the next-hop cache).
var pinnedMaps = []string{"client_routes_v4", "client_routes_v6", "peer_routes_v4", "peer_routes_v6",
	"flows", "outcomes", "config", "egress_ports", "rate_buckets"}

// load loads the objects, reusing pinned maps when PinDir is set. Pins that
// no longer fit this program (another version) are replaced: the state is
// rebuilt from scratch, and the slow path serves until it is relearned.
func (e *Engine) load(spec *ebpf.CollectionSpec) error {
	var opts *ebpf.CollectionOptions
	if e.pinDir != "" {
		if err := ensureBPFFS(e.pinDir); err != nil {
			return err
		}
		if err := os.MkdirAll(e.pinDir, 0o700); err != nil {
			return fmt.Errorf("offload: pin directory: %w", err)
		}
		for _, name := range pinnedMaps {
			spec.Maps[name].Pinning = ebpf.PinByName
		}
		opts = &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: e.pinDir}}
	}
	err := spec.LoadAndAssign(&e.objs, opts)
	if err != nil && e.pinDir != "" && errors.Is(err, ebpf.ErrMapIncompatible) {
		for _, name := range pinnedMaps {
			_ = os.Remove(filepath.Join(e.pinDir, name))
		}
		err = spec.LoadAndAssign(&e.objs, opts)
	}
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("offload: load BPF program: %+v", verr)
		}
		return fmt.Errorf("offload: load BPF program: %w", err)
	}
	return nil
}

// loadCompanions loads the programs that run beside the XDP one onto its
// maps, so all share channels, counters and limits: the TC build of the
// same source, the egress snooper and the XDP transmit tracepoints.
func (e *Engine) loadCompanions() error {
	var tc turnTCPrograms
	if err := e.loadOntoMaps("TC build", loadTurnTC, &tc); err != nil {
		return err
	}
	e.tc = tc.TurnOffloadTc
	var snoop turnSnoopPrograms
	if err := e.loadOntoMaps("snooper", loadTurnSnoop, &snoop); err != nil {
		return err
	}
	e.snoop = snoop.TurnSnoopEgress
	return e.loadOntoMaps("xmit tracepoints", loadTurnXmit, &e.xmit)
}

// loadOntoMaps loads an object's programs into progs, its maps replaced by
// the XDP object's.
func (e *Engine) loadOntoMaps(what string, load func() (*ebpf.CollectionSpec, error), progs any) error {
	spec, err := load()
	if err != nil {
		return fmt.Errorf("offload: read %s object: %w", what, err)
	}
	xdpMaps, shared := e.xdpMaps(), map[string]*ebpf.Map{}
	for name := range spec.Maps {
		m, ok := xdpMaps[name]
		if !ok {
			return fmt.Errorf("offload: %s object has a map %q the XDP object lacks", what, name)
		}
		shared[name] = m
	}
	err = spec.LoadAndAssign(progs, &ebpf.CollectionOptions{MapReplacements: shared})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("offload: load %s: %+v", what, verr)
		}
		return fmt.Errorf("offload: load %s: %w", what, err)
	}
	return nil
}

// closePrograms closes every loaded object (Close takes nil ones too).
func (e *Engine) closePrograms() error {
	return errors.Join(e.tc.Close(), e.snoop.Close(), e.xmit.Close(), e.objs.Close())
}

// watchXmitFailures attaches the tracepoints that catch XDP frames an
// egress did not take (bpf/turn_xmit.c).
func (e *Engine) watchXmitFailures() error {
	for _, p := range []*ebpf.Program{e.xmit.XdpBulkTxFailed, e.xmit.XdpDevmapXmitFailed, e.xmit.XdpTxException, e.xmit.XdpRedirectFailed} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			for _, w := range e.watchers {
				w.Close()
			}
			e.watchers = nil
			return fmt.Errorf("offload: attach xdp tracepoint: %w", err)
		}
		e.watchers = append(e.watchers, l)
	}
	return nil
}

// xdpMaps are the XDP object's maps by their names in the C source.
func (e *Engine) xdpMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"client_routes_v4": e.objs.ClientRoutesV4, "client_routes_v6": e.objs.ClientRoutesV6,
		"peer_routes_v4": e.objs.PeerRoutesV4, "peer_routes_v6": e.objs.PeerRoutesV6,
		"flows": e.objs.Flows, "outcomes": e.objs.Outcomes, "config": e.objs.Config,
		"iface_gen": e.objs.IfaceGen, "clock_cache": e.objs.ClockCache, "rate_buckets": e.objs.RateBuckets, "ifaces": e.objs.Ifaces,
		"snoop_events": e.objs.SnoopEvents, "egress_ports": e.objs.EgressPorts, "xmit_pending": e.objs.XmitPending,
	}
}

func kernelConfig(cfg Config) turnOffloadConfig {
	kc := turnOffloadConfig{
		RelayPortMin: cfg.RelayPortMin,
		RelayPortMax: cfg.RelayPortMax,
		// What the kernel would put on a datagram the relay sends itself (RFC 8656 section 14).
		Ipv4Ttl:      uint8(sysctlInt("/proc/sys/net/ipv4/ip_default_ttl", 64)),
		Ipv6HopLimit: uint8(sysctlInt("/proc/sys/net/ipv6/conf/default/hop_limit", 64)),
	}
	for i, p := range cfg.ListenPorts {
		kc.ListenPorts[i] = netorder.Port(p)
	}
	if cfg.Snoop {
		kc.Flags |= configFlagSnoop
	}
	kc.SpillEvery, kc.SpillIntervalNs = cfg.SpillEvery, uint64(cfg.SpillInterval.Nanoseconds())
	kc.RateLimit, kc.RateBurst = cfg.RateLimit.Rate, cfg.RateLimit.Burst
	return kc
}

func sysctlInt(path string, fallback int) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return fallback
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v <= 0 || v > 255 {
		return fallback
	}
	return v
}

func (e *Engine) pinPath(name string) string {
	if e.pinDir == "" {
		return ""
	}
	return filepath.Join(e.pinDir, name)
}

// reusePinnedLink takes over an attachment left by a previous run and points
// it at this run's program, without a moment of detachment.
func (e *Engine) reusePinnedLink(pin string, prog *ebpf.Program) (link.Link, bool) {
	if pin == "" {
		return nil, false
	}
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return nil, false
	}
	if err := l.Update(prog); err != nil {
		_ = l.Unpin()
		l.Close()
		return nil, false
	}
	return l, true
}

// Close releases the engine. Without PinDir it detaches the program from
// every interface and frees the maps: traffic then flows through the kernel
// to the user-space server again. With PinDir the pinned attachments and
// maps stay, and the fast path goes on until Unpin.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for idx, a := range e.attached {
		errs = append(errs, a.close())
		delete(e.attached, idx)
	}
	for _, l := range e.tcLinks {
		errs = append(errs, l.Close())
	}
	e.tcLinks = nil
	// Pinned, the fast path outlives this process, and needs forwarding on.
	if e.pinDir == "" {
		for _, restore := range e.restores {
			errs = append(errs, restore())
		}
	}
	e.restores = nil
	for _, l := range e.watchers {
		errs = append(errs, l.Close())
	}
	errs = append(errs, e.closePrograms())
	return errors.Join(errs...)
}

// Program is the loaded XDP program, for BPF_PROG_TEST_RUN in tests and benchmarks.
func (e *Engine) Program() *ebpf.Program { return e.objs.TurnOffload }

// ProgramTC is the loaded TC build of the program.
func (e *Engine) ProgramTC() *ebpf.Program { return e.tc }

// AllowEgress lets the program redirect to an interface it is not attached to
// (tests and benchmarks use it with BPF_PROG_TEST_RUN).
func (e *Engine) AllowEgress(ifindex int) error {
	return e.objs.EgressPorts.Put(uint32(ifindex), uint32(ifindex))
}

// ChannelCount is the number of channels installed in the maps.
func (e *Engine) ChannelCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.channels)
}

// Unpin removes the pinned attachments and maps: with Close, the fast path
// ends for good (`ebrtc offload --unpin`).
func (e *Engine) Unpin() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unpinLocked()
}

func (e *Engine) unpinLocked() error {
	var errs []error
	for _, a := range e.attached {
		for _, l := range a.links {
			errs = append(errs, ignoreNotPinned(l.Unpin()))
		}
	}
	for _, l := range e.tcLinks {
		errs = append(errs, ignoreNotPinned(l.Unpin()))
	}
	for _, m := range e.pinnableMaps() {
		errs = append(errs, ignoreNotPinned(m.Unpin()))
	}
	e.pinDir = "" // Close now ends everything, forwarding sysctls included
	return errors.Join(errs...)
}

// pinnableMaps are the maps of pinnedMaps, by name.
func (e *Engine) pinnableMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"client_routes_v4": e.objs.ClientRoutesV4, "client_routes_v6": e.objs.ClientRoutesV6,
		"peer_routes_v4": e.objs.PeerRoutesV4, "peer_routes_v6": e.objs.PeerRoutesV6, "flows": e.objs.Flows,
		"outcomes": e.objs.Outcomes, "config": e.objs.Config, "egress_ports": e.objs.EgressPorts,
		"rate_buckets": e.objs.RateBuckets}
}

// Pin keeps the maps and attachments in dir (on bpffs) beyond this process,
// as Config.PinDir does from the start: a running engine hands its fast
// path to the next process this way (`ebrtc turn` on SIGHUP), which loads
// with PinDir set to dir and takes the attachments over.
func (e *Engine) Pin(dir string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pinDir != "" {
		return fmt.Errorf("offload: already pinned in %s", e.pinDir)
	}
	if err := ensureBPFFS(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("offload: pin directory: %w", err)
	}
	var errs []error
	for name, m := range e.pinnableMaps() {
		errs = append(errs, m.Pin(filepath.Join(dir, name)))
	}
	for _, a := range e.attached {
		for name, l := range a.links {
			errs = append(errs, l.Pin(filepath.Join(dir, name)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Half pinned is worse than not: a restart would take a part over.
		e.unpinLocked()
		return fmt.Errorf("offload: pin in %s: %w", dir, err)
	}
	e.pinDir = dir
	return nil
}

// Reclaim points the engine's attachments at its own programs again and
// rewrites its configuration: after a hand-over that failed, the successor
// may have swapped its program (and maps) in and written its config.
func (e *Engine) Reclaim() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := []error{e.objs.Config.Put(uint32(0), e.kconf)}
	for _, a := range e.attached {
		for name, l := range a.links {
			prog := e.tc
			if strings.HasPrefix(name, "xdp_") {
				prog = e.objs.TurnOffload
			}
			errs = append(errs, l.Update(prog))
		}
	}
	return errors.Join(errs...)
}

// PinDir is where the engine's state is pinned ("" when it is not).
func (e *Engine) PinDir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pinDir
}

func ignoreNotPinned(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Channels returns the installed channels (after a restart: those restored
// from the pinned maps).
func (e *Engine) Channels() []Channel {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Channel, 0, len(e.channels))
	for ch := range e.channels {
		out = append(out, ch)
	}
	return out
}
