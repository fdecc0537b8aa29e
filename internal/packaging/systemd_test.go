package packaging

import (
	"bufio"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

var (
	unitPath     = filepath.Join(repoRoot, "deploy/systemd/ebrtc-turn.service")
	unitConfig   = filepath.Join(repoRoot, "deploy/systemd/turn.yaml")
	sysusersPath = filepath.Join(repoRoot, "deploy/systemd/sysusers-ebrtc.conf")
	tmpfilesPath = filepath.Join(repoRoot, "deploy/systemd/tmpfiles-ebrtc.conf")
)

// The binary's path and its command line in the unit.
const (
	unitBinary   = "/usr/local/bin/ebrtc"
	unitExecArgs = "turn --config /etc/ebrtc/turn.yaml"
)

// unit is a unit file's settings: section, then key, then its values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s: unexpected line %q", path, line)
			}
			u[section][key] = append(u[section][key], value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one is the single value of a key.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s= set %d times, want once", section, key, len(v))
	}
	return v[0]
}

// unitCapabilities are the unit's AmbientCapabilities=, which must equal its
// CapabilityBoundingSet=: the service holds these and can gain no other.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	u := parseUnit(t, unitPath)
	ambient := strings.Fields(u.one(t, "Service", "AmbientCapabilities"))
	bounding := strings.Fields(u.one(t, "Service", "CapabilityBoundingSet"))
	slices.Sort(ambient)
	slices.Sort(bounding)
	if !slices.Equal(ambient, bounding) {
		t.Fatalf("AmbientCapabilities=%v but CapabilityBoundingSet=%v", ambient, bounding)
	}
	return ambient
}

// The unit runs the server as a non-root user with the capabilities the
// issue names (plus CAP_PERFMON, which TestSystemdCapabilitiesEachNeeded
// shows it needs), no_new_privs, and the command line the docs give.
func TestSystemdUnitSettings(t *testing.T) {
	u := parseUnit(t, unitPath)
	caps := unitCapabilities(t)
	want := []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_PERFMON"}
	if !slices.Equal(caps, want) {
		t.Errorf("capabilities %v, want %v", caps, want)
	}
	if user := u.one(t, "Service", "User"); user == "root" || user == "0" || user == "" {
		t.Errorf("User=%s: the service must not run as root", user)
	}
	if got := u.one(t, "Service", "ExecStart"); got != unitBinary+" "+unitExecArgs {
		t.Errorf("ExecStart=%s, want %s %s", got, unitBinary, unitExecArgs)
	}
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"RuntimeDirectory": "ebrtc", "Restart": "on-failure",
	} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	families := strings.Fields(u.one(t, "Service", "RestrictAddressFamilies"))
	for _, f := range []string{"AF_NETLINK", "AF_INET", "AF_INET6", "AF_UNIX", "AF_XDP"} {
		if !slices.Contains(families, f) {
			t.Errorf("RestrictAddressFamilies= lacks %s", f)
		}
	}
	// The user the unit names is the one sysusers-ebrtc.conf creates.
	b, err := os.ReadFile(sysusersPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nu "+u.one(t, "Service", "User")+" ") {
		t.Errorf("%s does not create User=%s", sysusersPath, u.one(t, "Service", "User"))
	}
}

// systemd-analyze verify accepts the unit without a single remark (it exits
// 0 even on unknown keys and bad values, so any output fails), and flags a
// misspelt key and a bad value in a copy. Its exposure score stays "OK".
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	// verify insists that ExecStart's binary exists: point it at a fresh build.
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if strings.Count(text, unitBinary) != 1 {
		t.Fatalf("%s names %s %d times, want once (ExecStart)", unitPath, unitBinary, strings.Count(text, unitBinary))
	}
	text = strings.Replace(text, unitBinary, ebrtcBinary(t), 1)
	write := func(dir, text string) string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "ebrtc-turn.service")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tmp := t.TempDir()
	good := write(filepath.Join(tmp, "good"), text)
	out, err := exec.Command(analyze, "verify", "--man=no", good).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	mutated := strings.Replace(strings.Replace(text, "\nProtectHome=yes\n", "\nProtectHomee=yes\n", 1),
		"\nRestrictRealtime=yes\n", "\nRestrictRealtime=maybe\n", 1)
	bad := write(filepath.Join(tmp, "bad"), mutated)
	out, _ = exec.Command(analyze, "verify", "--man=no", bad).CombinedOutput()
	for _, want := range []string{"Unknown key 'ProtectHomee'", "Failed to parse boolean value, ignoring: maybe"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("verify of a mutated unit does not say %q:\n%s", want, out)
		}
	}

	// --threshold: exit non-zero above exposure 3.0 (of 10).
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=30", "--no-pager", good).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "Overall exposure level") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// systemd-sysusers creates the unit's user from sysusers-ebrtc.conf (a
// system user without a login shell), and systemd-tmpfiles the directory
// the unit binds as /sys/fs/bpf, the user's alone.
func TestSysusersAndTmpfiles(t *testing.T) {
	sysusers := testenv.RequireCommand(t, "systemd-sysusers")
	tmpfiles := testenv.RequireCommand(t, "systemd-tmpfiles")
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{sysusers, sysusersPath}, {tmpfiles, tmpfilesPath}} {
		conf, err := filepath.Abs(c[1]) // a relative one is taken as under --root
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"--root=" + root, conf}
		if c[0] == tmpfiles {
			args = append([]string{"--create"}, args...)
		}
		if out, err := exec.Command(c[0], args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", filepath.Base(c[0]), err, out)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSpace(string(passwd)), ":")
	if len(fields) != 7 || fields[0] != "ebrtc" || fields[6] != "/usr/sbin/nologin" || fields[2] == "0" {
		t.Fatalf("passwd entry %q, want a system user ebrtc with /usr/sbin/nologin", passwd)
	}
	// BindPaths=-SOURCE:/sys/fs/bpf names the directory tmpfiles makes.
	bind := parseUnit(t, unitPath).one(t, "Service", "BindPaths")
	source, _, _ := strings.Cut(strings.TrimPrefix(bind, "-"), ":")
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, source), &st); err != nil {
		t.Fatalf("BindPaths=%s: %v", bind, err)
	}
	if uid := strconv.Itoa(int(st.Uid)); uid != fields[2] || st.Mode&0o777 != 0o700 {
		t.Errorf("%s: uid %s mode %o, want ebrtc's (%s) and 0700", source, uid, st.Mode&0o777, fields[2])
	}
}

// The server started as the unit starts it: a non-root uid holding exactly
// the unit's capabilities (ambient), no_new_privs, a clean environment with
// the secret from the environment file, the shipped turn.yaml (flags point
// it at the testbed's addresses, and a listener on 443 needs
// CAP_NET_BIND_SERVICE). It attaches XDP without a warning and relays a
// channel on the fast path.
func TestSystemdUnitRelaysOnFastPath(t *testing.T) {
	caps := unitCapabilities(t)
	tb := newTestbed(t)
	r, err := startConfined(t, tb, systemdConfinement(caps), ebrtcBinary(t), systemdArgs(t)...)
	if err != nil {
		t.Fatal(err)
	}
	requireRunsAs(t, r, nobody, caps)
	requireFastPathStarted(t, r, testbed.ServerCliIface, testbed.ServerPeerIface)
	requireChannelOnFastPath(t, tb, server4, restSecret, testbed.MetricsAddr)
}

// Each of the unit's capabilities is needed: without it the server warns
// that the fast path is off, or cannot start.
func TestSystemdCapabilitiesEachNeeded(t *testing.T) {
	caps := unitCapabilities(t)
	symptoms := map[string]string{
		// Maps and programs: "map create: operation not permitted".
		"CAP_BPF": "fast path off",
		// The verifier rejects the XDP program ("R3 partial copy of pointer").
		"CAP_PERFMON": "fast path off",
		// The device map of egress ports and the attachments.
		"CAP_NET_ADMIN": "fast path off",
		// The listener on 443.
		"CAP_NET_BIND_SERVICE": "bind: permission denied",
	}
	tb := newTestbed(t)
	for _, drop := range caps {
		t.Run(drop, func(t *testing.T) {
			want, ok := symptoms[drop]
			if !ok {
				t.Fatalf("no known symptom of running without %s", drop)
			}
			r, err := startConfined(t, tb, systemdConfinement(without(caps, drop)), ebrtcBinary(t), systemdArgs(t)...)
			var out string
			if err != nil {
				out = err.Error() // exited, with its output
			} else {
				out = r.Output()
				if w := warnings(out); len(w) == 0 {
					t.Fatalf("started without %s and without a warning:\n%s", drop, out)
				}
			} // the relay stops when the subtest ends
			if !strings.Contains(out, want) {
				t.Errorf("without %s: want %q in:\n%s", drop, want, out)
			}
			t.Logf("without %s: %s", drop, firstLineWith(out, want))
		})
	}
}

// nobody stands in for the unit's ebrtc user (any uid but 0 will do).
const nobody = 65534

const restSecret = "packaging-test-secret"

var server4 = netip.MustParseAddrPort("10.201.1.1:3478")

func systemdConfinement(caps []string) confinement {
	return confinement{uid: nobody, caps: caps, ambient: true,
		env: []string{"EBRTC_AUTH_SECRET=" + restSecret}} // as from /etc/ebrtc/turn.env
}

// systemdArgs are the unit's ExecStart arguments with the shipped config and
// the testbed's addresses (flags override the file's keys), and a runtime
// directory of the test's own for /run/ebrtc.
func systemdArgs(t *testing.T) []string {
	config, _ := filepath.Abs(unitConfig) // the relay runs in another mount namespace
	args := append([]string{"turn", "--config", config}, runtimeDirArgs(t, nobody)...)
	args = append(args,
		"--listen", "udp://"+server4.String(), "--listen", "udp://[fd00:201:1::1]:3478",
		"--listen", "tcp://10.201.1.1:443",
		"--relay-ip", testbed.ServerPeerIP4.String(), "--relay-ip", testbed.ServerPeerIP6.String())
	for _, p := range testbed.Prefixes {
		args = append(args, "--allow-peer", p)
	}
	return args
}

func firstLineWith(s, substr string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, substr) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// rx: afxdp needs CAP_NET_RAW besides the unit's (AF_XDP sockets), as the
// unit's comment says.
func TestAFXDPNeedsNetRaw(t *testing.T) {
	caps := unitCapabilities(t)
	tb := newTestbed(t)
	args := append(systemdArgs(t), "--rx", "afxdp", "--offload", "off")
	t.Run("unit's", func(t *testing.T) {
		_, err := startConfined(t, tb, systemdConfinement(caps), ebrtcBinary(t), args...)
		if err == nil || !strings.Contains(err.Error(), "xsk: socket: operation not permitted") {
			t.Fatalf("rx afxdp without CAP_NET_RAW: %v", err)
		}
	})
	t.Run("with CAP_NET_RAW", func(t *testing.T) {
		r, err := startConfined(t, tb, systemdConfinement(append(slices.Clone(caps), "CAP_NET_RAW")), ebrtcBinary(t), args...)
		if err != nil {
			t.Fatal(err)
		}
		if w := warnings(r.Output()); len(w) > 0 {
			t.Errorf("warnings:\n%s", strings.Join(w, "\n"))
		}
	})
}

// runtimeDirArgs stand for the runtime directory (/run/ebrtc: systemd's
// RuntimeDirectory=, the DaemonSet's hostPath) with one of the test's own,
// owned by uid: the state file and the admin socket go there, not into the
// host's /run.
func runtimeDirArgs(t *testing.T, uid int) []string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	// The relay (another uid) must reach it through the test's directories.
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--state-file", filepath.Join(dir, "turn-state.json"), "--admin-listen", "unix:" + filepath.Join(dir, "turn.sock")}
}
