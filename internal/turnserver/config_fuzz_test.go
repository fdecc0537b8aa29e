package turnserver

import (
	"flag"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Fuzz targets for what an operator hands `ebrtc turn`: flags, EBRTC_*
// variables, the YAML file, and the listener syntax inside them.

// fuzzFlagNames are the flags of `ebrtc turn` but --config, which the
// target sets itself to the fuzzed YAML file.
func fuzzFlagNames() []string {
	var names []string
	FlagSet().VisitAll(func(f *flag.Flag) {
		if f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	slices.Sort(names)
	return names
}

func flagIndex(names []string, name string) uint8 {
	i := slices.Index(names, name)
	if i < 0 {
		panic("no flag " + name)
	}
	return uint8(i)
}

// fuzzEnv reads "KEY=VALUE" lines. EBRTC_CONFIG is dropped: the target
// always passes --config, and a fuzzed path could name /dev/zero.
func fuzzEnv(text string) map[string]string {
	env := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && k != "EBRTC_CONFIG" {
			env[k] = v
		}
	}
	return env
}

// quietStderr sends what the flag package prints on a parse error (the
// whole usage) to /dev/null while fn runs.
func quietStderr(t *testing.T, fn func()) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = devnull
	defer func() {
		os.Stderr = saved
		devnull.Close()
	}()
	fn()
}

// An error names the layer or key it comes from: Validate, the YAML file
// and the environment say "config...", the flag package "... flag -NAME".
var namesAFlag = regexp.MustCompile(`flag -[a-z][a-z-]*`)

// comparableSettings is Settings with nil and empty lists made equal (YAML
// decodes `user: []` to an empty list where a default is nil) and the peer
// policy by its rules (it holds a function).
type settingsView struct {
	Settings
	Allow, Deny []netip.Prefix
	Own         map[netip.Addr]bool
}

func comparableSettings(s *Settings) settingsView {
	c := *s
	var out settingsView
	if p := c.Policy; p != nil {
		out.Allow, out.Deny, out.Own = p.allow, p.deny, p.own
		if len(out.Allow) == 0 {
			out.Allow = nil
		}
		if len(out.Deny) == 0 {
			out.Deny = nil
		}
	}
	c.Policy = nil
	cfg := reflect.ValueOf(&c.Config).Elem()
	for i := range cfg.NumField() {
		if f := cfg.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	if len(c.RelayIPs) == 0 {
		c.RelayIPs = nil
	}
	if len(c.ExternalIPs) == 0 {
		c.ExternalIPs = nil
	}
	if len(c.Listeners) == 0 {
		c.Listeners = nil
	}
	out.Settings = c
	return out
}

// FuzzLoad: Load(args, env) with a fuzzed YAML file (--config), two fuzzed
// flags and fuzzed EBRTC_* variables returns settings or an error, never
// panics; an error starts with "config" or names a flag; accepted settings
// pass Validate again unchanged, carry the flags' values (the command line
// is the top layer), and load back the same from their own YAML form.
func FuzzLoad(f *testing.F) {
	names := fuzzFlagNames()
	fi := func(n string) uint8 { return flagIndex(names, n) }
	f.Add([]byte(""), fi("user"), "alice:pw", fi("realm"), "example.org", "")
	f.Add([]byte("user: [a:1, b:2]\nrealm: from-yaml\nrelay-ip: [192.0.2.10]\nmin-port: 50000\nlisten: [\"udp://192.0.2.10:3478\"]\n"),
		fi("user"), "c:3", fi("max-port"), "50100", "EBRTC_REALM=from-env\nEBRTC_DENY_PEER=198.51.100.0/24, 203.0.113.7")
	f.Add([]byte("auth-secret: s3\nlisten: [\"udp://[2001:db8::1]:3478\", \"tcp://0.0.0.0:3478\"]\nrelay-ip: [2001:db8::1, 192.0.2.1]\nexternal-ip: [198.51.100.1]\n"),
		fi("channel-lifetime"), "30s", fi("permission-lifetime"), "1m", "EBRTC_ALLOW_PEER=10.0.0.0/8,::ffff:10.0.0.0/104")
	f.Add([]byte("user: [a:b]\nlisten: [\"tls://192.0.2.1:5349\"]\ntls-cert: c.pem\ntls-key: k.pem\n"),
		fi("udp-threads"), "0x10", fi("metrics-listen"), "127.0.0.1:9100", "EBRTC_LOG_LEVEL=debug")
	f.Add([]byte("user: [a:b]\nrelay-ipp: [192.0.2.1]\n"), fi("offload"), "off", fi("offload-forwarding"), "manual", "")
	f.Add([]byte("user: a:b\nchannel-lifetime: 2h\n"), fi("user-quota"), "-1", fi("total-quota"), "3", "EBRTC_UDP_THREADS=x")
	f.Add([]byte("user: [a:b]\nmin-port: 1000\n"), fi("listen"), "udp://192.0.2.1:50000", fi("log-level"), "trace", "EBRTC_USER=x:y,z:w")
	f.Add([]byte("user: [a:b]\nallocate-rate: 5\n"), fi("max-bps"), "2000000", fi("allocate-rate"), "100001", "EBRTC_MAX_BPS=1")

	f.Fuzz(func(t *testing.T, doc []byte, f1 uint8, v1 string, f2 uint8, v2 string, envText string) {
		if len(doc) > 2<<10 || len(v1)+len(v2)+len(envText) > 1<<10 {
			return
		}
		path := filepath.Join(t.TempDir(), "turn.yaml")
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		n1, n2 := names[int(f1)%len(names)], names[int(f2)%len(names)]
		// --config first, so that no fuzzed value is taken for it (see FuzzFindConfigFlag).
		args := []string{"--config", path, "--" + n1, v1, "--" + n2, v2}
		env := fuzzEnv(envText)
		var s *Settings
		var err error
		quietStderr(t, func() { s, err = Load(args, func(k string) string { return env[k] }) })
		if err != nil {
			if s != nil {
				t.Fatalf("Load returned settings and error %v", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "config") && !namesAFlag.MatchString(msg) {
				t.Fatalf("error %q neither starts with \"config\" nor names a flag", msg)
			}
			return
		}
		if s == nil {
			t.Fatal("Load returned neither settings nor an error")
		}
		again, err := s.Config.Validate()
		if err != nil {
			t.Fatalf("accepted config fails its own Validate: %v\nconfig %+v", err, s.Config)
		}
		if !reflect.DeepEqual(comparableSettings(again), comparableSettings(s)) {
			t.Fatalf("Validate again gives other settings:\n%+v\n%+v", again, s)
		}
		checkSettingsShape(t, s)
		checkFlagsWin(t, s, [][2]string{{n1, v1}, {n2, v2}})

		// What an operator reads back (yaml.Marshal of the config) loads the same.
		out, err := yaml.Marshal(s.Config)
		if err != nil {
			t.Fatalf("marshal accepted config: %v", err)
		}
		path2 := filepath.Join(t.TempDir(), "again.yaml")
		if err := os.WriteFile(path2, out, 0o600); err != nil {
			t.Fatal(err)
		}
		var s2 *Settings
		quietStderr(t, func() { s2, err = Load([]string{"--config", path2}, noEnv) })
		if err != nil {
			t.Fatalf("the YAML form of an accepted config is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(comparableSettings(s2), comparableSettings(s)) {
			t.Fatalf("the YAML form of an accepted config loads differently:\n%s\n%+v\n%+v", out, s2.Config, s.Config)
		}
	})
}

// checkSettingsShape checks the typed settings against the documented limits.
func checkSettingsShape(t *testing.T, s *Settings) {
	t.Helper()
	if len(s.Listeners) != len(s.Listen) || len(s.Listeners) == 0 {
		t.Fatalf("%d listeners from %d listen values", len(s.Listeners), len(s.Listen))
	}
	for _, l := range s.Listeners {
		p := int(l.Addr.Port())
		if p == 0 || (p >= s.MinPort && p <= s.MaxPort) || l.Addr.Addr().Is4In6() {
			t.Fatalf("listener %v accepted (relay ports %d-%d)", l, s.MinPort, s.MaxPort)
		}
	}
	if s.MinPort < 1024 || s.MaxPort > 65535 || s.MinPort > s.MaxPort {
		t.Fatalf("relay ports %d-%d accepted", s.MinPort, s.MaxPort)
	}
	if len(s.Users) == 0 && s.AuthSecret == "" {
		t.Fatal("accepted with no credentials (open relay)")
	}
	for _, ips := range [][]netip.Addr{s.RelayIPs, s.ExternalIPs} {
		var v4, v6 int
		for _, a := range ips {
			if a.Is4In6() || a.IsUnspecified() || a.IsMulticast() {
				t.Fatalf("relay/external address %v accepted", a)
			}
			if a.Is4() {
				v4++
			} else {
				v6++
			}
		}
		if v4 > 1 || v6 > 1 {
			t.Fatalf("more than one address per family accepted: %v", ips)
		}
	}
	if s.Policy == nil || s.UDPThreads < 1 || s.UDPThreads > 256 || s.UserQuota < 0 || s.TotalQuota < 0 {
		t.Fatalf("settings out of range: %+v", s)
	}
	for _, d := range []time.Duration{s.ChannelLifetime, s.PermissionLifetime} {
		if d < time.Second || d > time.Hour {
			t.Fatalf("lifetime %v accepted", d)
		}
	}
}

// checkFlagsWin: the command line is the top layer, so every flag given
// decides its key: a list flag's values replace the lower layers' list.
func checkFlagsWin(t *testing.T, s *Settings, given [][2]string) {
	t.Helper()
	lists := map[string][]string{}
	last := map[string]string{}
	for _, g := range given {
		lists[g[0]] = append(lists[g[0]], g[1])
		last[g[0]] = g[1]
	}
	cfg := reflect.ValueOf(s.Config)
	for i := range cfg.NumField() {
		key := cfg.Type().Field(i).Tag.Get("yaml")
		v, ok := last[key]
		if !ok {
			continue
		}
		field := cfg.Field(i)
		var want any
		switch {
		case field.Type() == reflect.TypeFor[time.Duration]():
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("--%s %q accepted but does not parse", key, v)
			}
			want = d
		case field.Kind() == reflect.Int:
			n, err := strconv.ParseInt(v, 0, strconv.IntSize)
			if err != nil {
				t.Fatalf("--%s %q accepted but does not parse", key, v)
			}
			want = int(n)
		case field.Kind() == reflect.Uint64:
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				t.Fatalf("--%s %q accepted but does not parse", key, v)
			}
			want = n
		case field.Kind() == reflect.String:
			want = v
		case field.Kind() == reflect.Slice:
			want = lists[key]
		default:
			continue // a kind this check does not know yet
		}
		if got := field.Interface(); !reflect.DeepEqual(got, want) {
			t.Fatalf("--%s %q: the setting is %#v, want %#v (flags override YAML and environment)", key, v, got, want)
		}
	}
}

// FuzzFindConfigFlag: the YAML file Load reads is the one the flag parser
// takes for --config (a scan of args before parsing once disagreed: with
// "--config a --config b" it read a, with "--realm --config=x" it read x).
func FuzzFindConfigFlag(f *testing.F) {
	f.Add("--config\x00turn.yaml\x00--user\x00a:b")
	f.Add("--user\x00a:b\x00--config=turn.yaml")
	f.Add("-config\x00/etc/ebrtc/turn.yaml\x00--realm\x00r")
	f.Add("--realm\x00r\x00--listen\x00udp://192.0.2.1:3478")
	f.Add("--config=\x00--min-port\x001024")
	f.Add("--realm\x00-configx\x00--user\x00a:b")
	f.Add("--config\x00a.yaml\x00--realm\x00b.yaml")
	f.Add("-config\x000\x00-config\x00")
	f.Add("--realm\x00--config=/x")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		cfg := DefaultConfig()
		fs := flagSet(&cfg)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
			return // Load refuses the command line anyway
		}
		want := fs.Lookup("config").Value.String()
		if got, err := configFlag(args); err != nil || got != want {
			t.Fatalf("args %q: Load reads config file %q, the flag parser sets --config %q", args, got, want)
		}
	})
}

// FuzzParseListener: parseListener accepts only udp|tcp|tls|dtls with an IP
// and a nonzero port, unmaps IPv4-mapped addresses, names the value in its
// errors, and what it accepts prints back to a URL that parses the same.
func FuzzParseListener(f *testing.F) {
	for _, s := range []string{
		"udp://0.0.0.0:3478", "tcp://0.0.0.0:3478", "tls://192.0.2.1:5349", "dtls://[2001:db8::1]:5349",
		"udp://[::ffff:192.0.2.1]:3478", "udp://[fe80::1%25eth0]:3478", "UDP://192.0.2.1:3478",
		"udp://192.0.2.1:0", "udp://nonsense", "sctp://192.0.2.1:3478", "udp://192.0.2.1", "udp://192.0.2.1:3478/x",
		"udp:192.0.2.1:3478", "udp://localhost:3478", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l, err := parseListener(v)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(v)) {
				t.Fatalf("error %q does not name the value %q", err, v)
			}
			if l != (Listener{}) {
				t.Fatalf("error %v with a listener %v", err, l)
			}
			return
		}
		switch l.Scheme {
		case "udp", "tcp", "tls", "dtls":
		default:
			t.Fatalf("%q accepted with scheme %q", v, l.Scheme)
		}
		if !l.Addr.IsValid() || l.Addr.Port() == 0 || l.Addr.Addr().Is4In6() {
			t.Fatalf("%q accepted as %v", v, l.Addr)
		}
		canonical := (&url.URL{Scheme: l.Scheme, Host: l.Addr.String()}).String()
		back, err := parseListener(canonical)
		if err != nil || back != l {
			t.Fatalf("%q parsed as %+v, printed %q, parsed back as %+v, %v", v, l, canonical, back, err)
		}
	})
}

// FuzzValidateListen runs fuzzed listeners, relay and external addresses
// through Validate: it refuses with "config: KEY:" or accepts settings that
// pass it again.
func FuzzValidateListen(f *testing.F) {
	f.Add("udp://192.0.2.1:3478", "192.0.2.1", "", 49152, 65535)
	f.Add("udp://[2001:db8::1]:3478", "2001:db8::1,192.0.2.1", "198.51.100.1", 1024, 2000)
	f.Add("tcp://192.0.2.1:50000", "::ffff:192.0.2.1", "", 50000, 50000)
	f.Add("udp://192.0.2.1:3478", "192.0.2.1,192.0.2.2", "2001:db8::5", 49152, 65535)
	f.Fuzz(func(t *testing.T, listen, relayIPs, externalIPs string, minPort, maxPort int) {
		c := DefaultConfig()
		c.Users = []string{"alice:pw"}
		c.Listen = strings.Split(listen, ",")
		if relayIPs != "" {
			c.RelayIPs = strings.Split(relayIPs, ",")
		}
		if externalIPs != "" {
			c.ExternalIPs = strings.Split(externalIPs, ",")
		}
		c.MinPort, c.MaxPort = minPort, maxPort
		s, err := c.Validate()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error %q does not start with \"config: \"", err)
			}
			return
		}
		checkSettingsShape(t, s)
		for _, ext := range s.ExternalIPs {
			if relayIPFor(s.RelayIPs, ext.Is4()) == (netip.Addr{}) {
				t.Fatalf("external-ip %v accepted without a relay-ip of its family", ext)
			}
		}
		if _, err := s.Config.Validate(); err != nil {
			t.Fatalf("accepted config fails its own Validate: %v", err)
		}
	})
}
