package turnserver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/logs"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
)

// Config is the whole configuration of `ebrtc turn`. Every field has the same
// key as a command-line flag, a YAML key and an EBRTC_ environment variable
// (docs/configuration.md).
type Config struct {
	Listen             []string      `yaml:"listen"`
	UDPThreads         int           `yaml:"udp-threads"`
	Users              []string      `yaml:"user"`
	AuthSecret         string        `yaml:"auth-secret"`
	Realm              string        `yaml:"realm"`
	RelayIPs           []string      `yaml:"relay-ip"`
	ExternalIPs        []string      `yaml:"external-ip"`
	MinPort            int           `yaml:"min-port"`
	MaxPort            int           `yaml:"max-port"`
	AllowPeers         []string      `yaml:"allow-peer"`
	DenyPeers          []string      `yaml:"deny-peer"`
	ChannelLifetime    time.Duration `yaml:"channel-lifetime"`
	PermissionLifetime time.Duration `yaml:"permission-lifetime"`
	StaleNonce         time.Duration `yaml:"stale-nonce"`
	UserQuota          int           `yaml:"user-quota"`
	UserQuotaScope     string        `yaml:"user-quota-scope"`
	TotalQuota         int           `yaml:"total-quota"`
	AllocateRate       int           `yaml:"allocate-rate"`
	MaxBitrate         uint64        `yaml:"max-bps"`
	Offload            string        `yaml:"offload"`
	OffloadIfaces      []string      `yaml:"offload-iface"`
	OffloadForwarding  string        `yaml:"offload-forwarding"`
	RX                 string        `yaml:"rx"`
	KeepOffload        bool          `yaml:"keep-offload"`
	PinDir             string        `yaml:"pin-dir"`
	StateFile          string        `yaml:"state-file"`
	AdminListen        string        `yaml:"admin-listen"`
	MetricsLabels      string        `yaml:"metrics-labels"`
	MetricsListen      string        `yaml:"metrics-listen"`
	TLSCert            string        `yaml:"tls-cert"`
	TLSKey             string        `yaml:"tls-key"`
	LogLevel           string        `yaml:"log-level"`
	LogFormat          string        `yaml:"log-format"`

	// A fleet sheds load (loadshed.go).
	AlternateServers     []string `yaml:"alternate-server"`
	TLSAlternateServers  []string `yaml:"tls-alternate-server"`
	ShedAboveAllocations int      `yaml:"shed-above-allocations"`
}

// DefaultConfig is what an empty configuration means.
func DefaultConfig() Config {
	return Config{
		Listen:             []string{"udp://0.0.0.0:3478", "tcp://0.0.0.0:3478"},
		UDPThreads:         runtime.NumCPU(),
		Realm:              "ebrtc",
		MinPort:            49152,
		MaxPort:            65535,
		ChannelLifetime:    10 * time.Minute, // RFC 8656 section 12
		PermissionLifetime: 5 * time.Minute,  // RFC 8656 section 9
		StaleNonce:         10 * time.Minute, // coturn's default
		UserQuota:          100,              // per credential and source: an office of browsers (1-4 each) behind one NAT on an app's one credential
		UserQuotaScope:     "source",
		AllocateRate:       10,
		Offload:            "auto",
		OffloadForwarding:  "auto",
		RX:                 "kernel",
		PinDir:             "/sys/fs/bpf/ebrtc/turn",
		StateFile:          "/run/ebrtc/turn-state.json",
		MetricsLabels:      "none",
		LogLevel:           "info",
		LogFormat:          "text",
	}
}

// Listener is one parsed --listen value.
type Listener struct {
	Scheme string // udp, tcp, tls, dtls
	Addr   netip.AddrPort
}

// Settings is the validated, typed form of Config.
type Settings struct {
	Config
	Listeners   []Listener
	Users       map[string]string
	RelayIPs    []netip.Addr // at most one per family
	ExternalIPs []netip.Addr // at most one per family
	Policy      *PeerPolicy
	RateLimit   ratelimit.Limit // from MaxBitrate
}

// Load builds the configuration from defaults, then the YAML file named by
// --config, then EBRTC_* environment variables, then the flags in args.
func Load(args []string, env func(string) string) (*Settings, error) {
	cfg := DefaultConfig()
	fs := flagSet(&cfg)
	configPath, err := configFlag(args)
	if err != nil {
		return nil, err
	}
	if configPath == "" {
		configPath = env("EBRTC_CONFIG")
	}
	if configPath != "" {
		if err := loadYAML(configPath, &cfg); err != nil {
			return nil, err
		}
	}
	if err := applyEnv(fs, env); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("config: unexpected argument %q (a yes/no flag takes its value as --flag=false)", fs.Arg(0))
	}
	return cfg.Validate()
}

// FlagSet returns the flags of `ebrtc turn`, bound to a default Config, for --help.
func FlagSet() *flag.FlagSet {
	cfg := DefaultConfig()
	return flagSet(&cfg)
}

func flagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("turn", flag.ContinueOnError)
	fs.String("config", "", "YAML configuration file (keys as the flags)")
	fs.Var(&listFlag{v: &cfg.Listen}, "listen", "listener `scheme://IP:PORT`, scheme udp|tcp|tls|dtls (repeatable)")
	fs.IntVar(&cfg.UDPThreads, "udp-threads", cfg.UDPThreads, "UDP sockets per UDP listener (SO_REUSEPORT)")
	fs.Var(&listFlag{v: &cfg.Users}, "user", "long-term credential `name:password` (repeatable)")
	fs.StringVar(&cfg.AuthSecret, "auth-secret", cfg.AuthSecret, "TURN REST API shared secret (ephemeral credentials)")
	fs.StringVar(&cfg.Realm, "realm", cfg.Realm, "authentication realm")
	fs.Var(&listFlag{v: &cfg.RelayIPs}, "relay-ip", "relay address on the wire, one per family (repeatable)")
	fs.Var(&listFlag{v: &cfg.ExternalIPs}, "external-ip", "advertised relay address if it differs (NAT), one per family (repeatable)")
	fs.IntVar(&cfg.MinPort, "min-port", cfg.MinPort, "lowest relay port")
	fs.IntVar(&cfg.MaxPort, "max-port", cfg.MaxPort, "highest relay port")
	fs.Var(&listFlag{v: &cfg.AllowPeers}, "allow-peer", "`CIDR` of peers allowed despite the default refusal (repeatable)")
	fs.Var(&listFlag{v: &cfg.DenyPeers}, "deny-peer", "`CIDR` of peers always refused (repeatable)")
	fs.DurationVar(&cfg.ChannelLifetime, "channel-lifetime", cfg.ChannelLifetime, "lifetime of a channel binding")
	fs.DurationVar(&cfg.PermissionLifetime, "permission-lifetime", cfg.PermissionLifetime, "lifetime of a permission")
	fs.DurationVar(&cfg.StaleNonce, "stale-nonce", cfg.StaleNonce, "how long a nonce is valid; older ones get 438 Stale Nonce")
	fs.IntVar(&cfg.UserQuota, "user-quota", cfg.UserQuota, "allocations per user and source address (--user-quota-scope; 0: unlimited)")
	fs.StringVar(&cfg.UserQuotaScope, "user-quota-scope", cfg.UserQuotaScope, "what --user-quota counts: source (a user's allocations from one address, an IPv6 /64 one: an app's one credential shared by its clients works) or user (a user's allocations wherever they come from)")
	fs.IntVar(&cfg.TotalQuota, "total-quota", cfg.TotalQuota, "allocations in total (0: unlimited)")
	fs.IntVar(&cfg.AllocateRate, "allocate-rate", cfg.AllocateRate, "allocations a second per source IP, in bursts of up to 3x (0: unlimited)")
	fs.Uint64Var(&cfg.MaxBitrate, "max-bps", cfg.MaxBitrate, "relayed bits a second per allocation and direction, on both paths (0: unlimited)")
	fs.StringVar(&cfg.Offload, "offload", cfg.Offload, "fast path: auto (XDP where the interface and its neighbours take XDP frames, TC ingress elsewhere), xdp, tc or off")
	fs.Var(&listFlag{v: &cfg.OffloadIfaces}, "offload-iface", "interface to attach XDP to (repeatable; default: those carrying listen and relay addresses)")
	fs.StringVar(&cfg.RX, "rx", cfg.RX, "how UDP listeners receive: kernel (sockets) or afxdp (AF_XDP sockets fed by an XDP classifier; needs --offload off)")
	fs.StringVar(&cfg.OffloadForwarding, "offload-forwarding", cfg.OffloadForwarding, "auto: turn on loopback's forwarding sysctls (route lookups only; no interface forwards) while running; manual: require them")
	fs.BoolVar(&cfg.KeepOffload, "keep-offload", cfg.KeepOffload, "on stop, leave the fast path relaying (pinned in pin-dir) and save the allocations in state-file for the next start")
	fs.StringVar(&cfg.PinDir, "pin-dir", cfg.PinDir, "bpffs directory for the fast path's maps and attachments across restarts")
	fs.StringVar(&cfg.StateFile, "state-file", cfg.StateFile, "where a stop with keep-offload saves the allocations for the next start")
	fs.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "admin endpoint for `ebrtc top`: unix:PATH or a loopback IP:PORT (empty: off)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "Prometheus endpoint `IP:PORT` (empty: off)")
	fs.StringVar(&cfg.MetricsLabels, "metrics-labels", cfg.MetricsLabels, "per-user traffic series: none, user (a series per user) or allocation (also per allocation)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "certificate file for tls:// and dtls:// listeners")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "private key file for tls:// and dtls:// listeners")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "error, warn, info, debug or trace")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json (one JSON object per line, log/slog's)")
	fs.Var(&listFlag{v: &cfg.AlternateServers}, "alternate-server", "`IP:PORT` of another server taking new udp/tcp allocations over shed-above-allocations, one per family (repeatable)")
	fs.Var(&listFlag{v: &cfg.TLSAlternateServers}, "tls-alternate-server", "`IP:PORT` as alternate-server, for tls/dtls clients (repeatable)")
	fs.IntVar(&cfg.ShedAboveAllocations, "shed-above-allocations", cfg.ShedAboveAllocations, "answer new Allocates 300 Try Alternate once the server holds this many allocations (0: never)")
	return fs
}

// listFlag is a repeatable flag whose first use on a layer replaces the
// values of the layer below (defaults, YAML, environment).
type listFlag struct {
	v   *[]string
	set bool
}

func (l *listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l *listFlag) Set(s string) error {
	if !l.set {
		*l.v = nil
		l.set = true
	}
	*l.v = append(*l.v, s)
	return nil
}

// configFlag is the --config the command line sets, read by the flag
// parser itself (a scratch parse), so "--config a --config b" and
// "--realm --config=x" mean what they mean everywhere else.
func configFlag(args []string) (string, error) {
	var scratch Config
	fs := flagSet(&scratch)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	return fs.Lookup("config").Value.String(), nil
}

func loadYAML(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	// An empty file means all defaults.
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// applyEnv sets every flag whose EBRTC_ variable is set; lists are comma-separated.
func applyEnv(fs *flag.FlagSet, env func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || f.Name == "config" {
			return
		}
		name := "EBRTC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		val := env(name)
		if val == "" {
			return
		}
		values := []string{val}
		if _, isList := f.Value.(*listFlag); isList {
			values = strings.Split(val, ",")
		}
		for _, v := range values {
			if e := f.Value.Set(strings.TrimSpace(v)); e != nil {
				err = fmt.Errorf("config: %s: %w", name, e)
				return
			}
		}
		// The command line starts a new layer for lists.
		if l, ok := f.Value.(*listFlag); ok {
			l.set = false
		}
	})
	return err
}

// Validate checks every value and names the key of the first bad one.
func (c Config) Validate() (*Settings, error) {
	s := &Settings{Config: c, Users: map[string]string{}}
	bad := func(key, format string, args ...any) (*Settings, error) {
		return nil, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
	if len(c.Listen) == 0 {
		return bad("listen", "at least one listener is needed")
	}
	for _, l := range c.Listen {
		ln, err := parseListener(l)
		if err != nil {
			return bad("listen", "%v", err)
		}
		if (ln.Scheme == "tls" || ln.Scheme == "dtls") && (c.TLSCert == "" || c.TLSKey == "") {
			return bad("tls-cert", "%s listener %s needs tls-cert and tls-key", ln.Scheme, l)
		}
		s.Listeners = append(s.Listeners, ln)
	}
	if c.UDPThreads < 1 || c.UDPThreads > 256 {
		return bad("udp-threads", "%d is not in 1-256", c.UDPThreads)
	}
	for _, u := range c.Users {
		name, pass, ok := strings.Cut(u, ":")
		if !ok || name == "" || pass == "" {
			return bad("user", "%q is not name:password", u)
		}
		s.Users[name] = pass
	}
	if len(s.Users) == 0 && c.AuthSecret == "" {
		return bad("user", "no credentials: give user or auth-secret (an open relay is not allowed)")
	}
	if c.Realm == "" {
		return bad("realm", "must not be empty")
	}
	var err error
	if s.RelayIPs, err = parseOnePerFamily(c.RelayIPs); err != nil {
		return bad("relay-ip", "%v", err)
	}
	if s.ExternalIPs, err = parseOnePerFamily(c.ExternalIPs); err != nil {
		return bad("external-ip", "%v", err)
	}
	for _, ext := range s.ExternalIPs {
		if relayIPFor(s.RelayIPs, ext.Is4()) == (netip.Addr{}) {
			return bad("external-ip", "%s has no relay-ip of its family", ext)
		}
	}
	if c.MinPort < 1024 || c.MaxPort > 65535 || c.MinPort > c.MaxPort {
		return bad("min-port", "relay port range %d-%d is not within 1024-65535", c.MinPort, c.MaxPort)
	}
	for _, ln := range s.Listeners {
		if p := int(ln.Addr.Port()); p >= c.MinPort && p <= c.MaxPort {
			return bad("listen", "port %d lies in the relay port range %d-%d", p, c.MinPort, c.MaxPort)
		}
	}
	if c.ChannelLifetime < time.Second || c.ChannelLifetime > time.Hour {
		return bad("channel-lifetime", "%v is not within 1s-1h", c.ChannelLifetime)
	}
	if c.PermissionLifetime < time.Second || c.PermissionLifetime > time.Hour {
		return bad("permission-lifetime", "%v is not within 1s-1h", c.PermissionLifetime)
	}
	if c.StaleNonce < time.Second || c.StaleNonce > 24*time.Hour {
		return bad("stale-nonce", "%v is not within 1s-24h", c.StaleNonce)
	}
	if c.UserQuota < 0 {
		return bad("user-quota", "must not be negative")
	}
	if c.UserQuotaScope != "source" && c.UserQuotaScope != "user" {
		return bad("user-quota-scope", "%q (want source or user)", c.UserQuotaScope)
	}
	if c.TotalQuota < 0 {
		return bad("total-quota", "must not be negative")
	}
	if c.AllocateRate < 0 || c.AllocateRate > 100000 {
		return bad("allocate-rate", "%d is not within 0-100000", c.AllocateRate)
	}
	if s.RateLimit, err = ratelimit.FromBitrate(c.MaxBitrate); err != nil {
		return bad("max-bps", "%v", err)
	}
	if c.Offload != "off" {
		if _, err := offload.ParseMode(c.Offload); err != nil {
			return bad("offload", "%v", err)
		}
	}
	switch c.RX {
	case "kernel":
	case "afxdp":
		if c.Offload != "off" {
			return bad("rx", "afxdp needs offload off (both take the interfaces' XDP hook; the fast path already keeps channel data out of user space)")
		}
	default:
		return bad("rx", "%q is not kernel or afxdp", c.RX)
	}
	if c.OffloadForwarding != "auto" && c.OffloadForwarding != "manual" {
		return bad("offload-forwarding", "%q is not auto or manual", c.OffloadForwarding)
	}
	if c.MetricsListen != "" {
		if _, err := netip.ParseAddrPort(c.MetricsListen); err != nil {
			return bad("metrics-listen", "%v", err)
		}
	}
	if err := validateOperations(c); err != nil {
		return nil, err
	}
	if _, ok := logs.Levels[c.LogLevel]; !ok {
		return bad("log-level", "%q is not error, warn, info, debug or trace", c.LogLevel)
	}
	if !slices.Contains(logs.Formats, c.LogFormat) {
		return bad("log-format", "%q is not text or json", c.LogFormat)
	}
	if err := validateLoadShedding(c, s); err != nil {
		return nil, err
	}
	if s.Policy, err = NewPeerPolicy(c.AllowPeers, c.DenyPeers, append(append([]netip.Addr{}, s.RelayIPs...), s.ExternalIPs...)); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return s, nil
}

func parseListener(v string) (Listener, error) {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return Listener{}, fmt.Errorf("%q is not scheme://IP:PORT", v)
	}
	switch u.Scheme {
	case "udp", "tcp", "tls", "dtls":
	default:
		return Listener{}, fmt.Errorf("%q: scheme %q is not udp, tcp, tls or dtls", v, u.Scheme)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		return Listener{}, fmt.Errorf("%q: %v", v, err)
	}
	if ap.Port() == 0 {
		return Listener{}, fmt.Errorf("%q: port 0", v)
	}
	return Listener{Scheme: u.Scheme, Addr: addrport.Unmap(ap)}, nil
}

func parseOnePerFamily(values []string) ([]netip.Addr, error) {
	var out []netip.Addr
	var have4, have6 bool
	for _, v := range values {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", v)
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("%s cannot be a relay address", a)
		}
		if (a.Is4() && have4) || (a.Is6() && have6) {
			return nil, fmt.Errorf("more than one %s address", map[bool]string{true: "IPv4", false: "IPv6"}[a.Is4()])
		}
		have4, have6 = have4 || a.Is4(), have6 || a.Is6()
		out = append(out, a)
	}
	return out, nil
}

func relayIPFor(ips []netip.Addr, v4 bool) netip.Addr {
	for _, a := range ips {
		if a.Is4() == v4 {
			return a
		}
	}
	return netip.Addr{}
}
