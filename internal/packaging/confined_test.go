// Package packaging tests what deploy/ ships: the systemd unit and the
// Kubernetes manifest are checked by their own tools (systemd-analyze,
// kubeconform), and the real server is run with exactly the privileges
// each grants, in a namespace testbed, relaying a channel on the fast path.
package packaging

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST API's HMAC
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// repoRoot is where deploy/ is (tests run in their package's directory).
const repoRoot = "../.."

// ebrtcBinary is cmd/ebrtc, built once for all tests of the package.
func ebrtcBinary(t *testing.T) string { return testbed.SharedEbrtc(t) }

func TestMain(m *testing.M) { os.Exit(testbed.RunTests(m)) }

// Capability numbers (linux/capability.h) of the names the unit and the
// manifest may use.
var capNumbers = map[string]int{
	"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_NET_ADMIN":        unix.CAP_NET_ADMIN,
	"CAP_NET_RAW":          unix.CAP_NET_RAW,
	"CAP_PERFMON":          unix.CAP_PERFMON,
	"CAP_BPF":              unix.CAP_BPF,
}

// confinement is how a packaging runs the server: as which uid, with which
// capabilities, and what of the file system it sees as a service would.
type confinement struct {
	uid int
	// caps, as CAP_NAME. The bounding set is limited to them; ambient also
	// raises them for a non-root uid (systemd's AmbientCapabilities=), while
	// uid 0 gets them from the bounding set at exec (a container runtime).
	caps    []string
	ambient bool
	// readOnlyProcSys: /proc/sys read-only, as container runtimes mount it.
	readOnlyProcSys bool
	env             []string // the whole environment, KEY=VALUE
}

// startConfined runs bin with args as c says in the testbed's server
// namespace. The namespace's own mount namespace (ip netns exec) gets a
// bpffs at /sys/fs/bpf owned by the uid, as the unit's BindPaths= and the
// manifest's hostPath give the server; nothing of it reaches the host.
func startConfined(t *testing.T, tb *testbed.Testbed, c confinement, bin string, args ...string) (*testbed.Relay, error) {
	t.Helper()
	for _, cmd := range []string{"sh", "mount", "chown", "env", "setpriv"} {
		testenv.RequireCommand(t, cmd)
	}
	// $1: the uid:gid owning the bpffs; $2: 1 for a read-only /proc/sys.
	script := `set -e
mount -t bpf -o mode=0700 bpf /sys/fs/bpf
chown "$1" /sys/fs/bpf
if [ "$2" = 1 ]; then mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; fi
shift 2
exec "$@"`
	roProcSys := "0"
	if c.readOnlyProcSys {
		roProcSys = "1"
	}
	set := "-all"
	for _, name := range c.caps {
		set += ",+" + strings.ToLower(strings.TrimPrefix(name, "CAP_"))
	}
	priv := []string{"setpriv", "--reuid=" + strconv.Itoa(c.uid), "--regid=" + strconv.Itoa(c.uid), "--clear-groups",
		"--no-new-privs", "--bounding-set=" + set}
	if c.ambient {
		priv = append(priv, "--inh-caps="+set, "--ambient-caps="+set)
	} else {
		priv = append(priv, "--inh-caps=-all")
	}
	argv := []string{"-c", script, "sh", fmt.Sprintf("%d:%d", c.uid, c.uid), roProcSys}
	argv = append(argv, "env", "-i")
	argv = append(argv, c.env...)
	argv = append(argv, priv...)
	argv = append(argv, bin)
	argv = append(argv, args...)
	r, err := tb.StartRelay("sh", argv...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := r.Stop(10 * time.Second); err != nil {
			t.Errorf("relay stop: %v\n%s", err, r.Output())
		}
	})
	return r, nil
}

// newTestbed is the three-namespace testbed, removed when the test ends.
func newTestbed(t *testing.T) *testbed.Testbed {
	t.Helper()
	return testbed.ForTest(t, testbed.Options{})
}

// processPrivileges is what the kernel says a process holds.
type processPrivileges struct {
	uids                  []int // real, effective, saved, fs
	effective, permitted  uint64
	bounding, ambient     uint64
	noNewPrivs, haveFlags bool
}

func readPrivileges(t *testing.T, pid int) processPrivileges {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var p processPrivileges
	for line := range strings.Lines(string(b)) {
		key, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		value = strings.TrimSpace(value)
		mask := func() uint64 {
			v, err := strconv.ParseUint(value, 16, 64)
			if err != nil {
				t.Fatalf("%s: %q", key, value)
			}
			return v
		}
		switch key {
		case "Uid":
			for _, f := range strings.Fields(value) {
				n, _ := strconv.Atoi(f)
				p.uids = append(p.uids, n)
			}
		case "CapEff":
			p.effective = mask()
		case "CapPrm":
			p.permitted = mask()
		case "CapBnd":
			p.bounding = mask()
		case "CapAmb":
			p.ambient = mask()
		case "NoNewPrivs":
			p.noNewPrivs, p.haveFlags = value == "1", true
		}
	}
	return p
}

func capMask(t *testing.T, names []string) uint64 {
	t.Helper()
	var m uint64
	for _, n := range names {
		bit, ok := capNumbers[n]
		if !ok {
			t.Fatalf("capability %q is not one the server is known to use", n)
		}
		m |= 1 << bit
	}
	return m
}

// requireRunsAs checks the relay process's uid and that it holds exactly
// caps (effective, permitted, bounding), with no_new_privs set.
func requireRunsAs(t *testing.T, r *testbed.Relay, uid int, caps []string) {
	t.Helper()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", r.Pid()))
	if err != nil || strings.TrimSpace(string(comm)) != "ebrtc" {
		t.Fatalf("pid %d is %q (%v), not the relay", r.Pid(), comm, err)
	}
	p := readPrivileges(t, r.Pid())
	want := capMask(t, caps)
	for _, u := range p.uids {
		if u != uid {
			t.Errorf("relay uids %v, want all %d", p.uids, uid)
			break
		}
	}
	if p.effective != want || p.permitted != want || p.bounding != want {
		t.Errorf("relay capabilities: effective %#x permitted %#x bounding %#x, want %#x (%v)",
			p.effective, p.permitted, p.bounding, want, caps)
	}
	if !p.noNewPrivs {
		t.Errorf("relay runs without no_new_privs")
	}
	t.Logf("relay pid %d: uid %d, CapEff %#x (%s), CapAmb %#x, NoNewPrivs %v", r.Pid(), p.uids[0], p.effective,
		strings.Join(caps, " "), p.ambient, p.noNewPrivs)
}

// warnings are the relay's log lines at warn level or above, text or JSON:
// a privilege it lacks shows as one ("fast path off", "IPv6 datagrams
// spoofed ... will reach the server").
func warnings(output string) []string {
	var out []string
	for line := range strings.Lines(output) {
		line = strings.TrimSpace(line)
		var rec struct{ Level string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level != "" {
			if rec.Level == "WARN" || rec.Level == "ERROR" {
				out = append(out, line)
			}
			continue
		}
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}

// requireFastPathStarted: no warning, and XDP (with TC) on every interface.
func requireFastPathStarted(t *testing.T, r *testbed.Relay, ifaces ...string) {
	t.Helper()
	out := r.Output()
	if w := warnings(out); len(w) > 0 {
		t.Errorf("the relay warned (a privilege missing?):\n%s", strings.Join(w, "\n"))
	}
	for _, iface := range ifaces {
		if !strings.Contains(out, "fast path: xdp+tc on "+iface+" ") {
			t.Errorf("no XDP fast path on %s:\n%s", iface, out)
		}
	}
}

// restCredentials are TURN REST API credentials for secret, valid an hour.
func restCredentials(secret, user string) (string, string) {
	name := fmt.Sprintf("%d:%s", time.Now().Add(time.Hour).Unix(), user)
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(name))
	return name, base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Datagrams each way through the channel.
const relayed = 200

// requireChannelOnFastPath allocates with REST credentials, binds a channel
// to a peer and sends datagrams both ways: all must arrive, and the fast
// path must have relayed at least 99% of them (its metrics at metricsAddr
// in the server namespace).
func requireChannelOnFastPath(t *testing.T, tb *testbed.Testbed, server netip.AddrPort, secret, metricsAddr string) {
	t.Helper()
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	user, pass := restCredentials(secret, "packaging")
	c, err := turnclient.AllocateWith(conn, server, turnclient.Options{User: user, Password: pass})
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	t.Cleanup(func() { _ = c.Release() })
	peerAddr := netip.AddrPortFrom(testbed.PeerIP4, uint16(peer.LocalAddr().(*net.UDPAddr).Port))
	const channel = 0x4000
	if err := c.ChannelBind(peerAddr, channel); err != nil {
		t.Fatal(err)
	}
	scrape := func() testbed.Metrics {
		m, err := testbed.ScrapeMetrics(tb.Server, metricsAddr)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		return m
	}
	for deadline := time.Now().Add(10 * time.Second); scrape()["ebrtc_xdp_channels"] < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the channel never reached the fast path")
		}
	}
	// A first exchange lets the kernel resolve both neighbours: until then
	// the fast path's route lookups miss and pass datagrams up.
	warm := func() {
		if err := c.SendChannelData(channel, []byte("warm-up-to-peer")); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.WriteTo([]byte("warm-up-to-client"), net.UDPAddrFromAddrPort(c.Relay)); err != nil {
			t.Fatal(err)
		}
	}
	warm()
	if receive(t, peer, 1, "warm-up") != 1 || receive(t, conn, 1, "warm-up") != 1 {
		t.Fatal("warm-up datagrams not relayed")
	}
	time.Sleep(100 * time.Millisecond) // neighbour entries settle
	warm()
	drain(peer)
	drain(conn)
	before := scrape()

	// Client to peer, as ChannelData.
	for i := range relayed {
		if err := c.SendChannelData(channel, fmt.Appendf(nil, "to-peer-%04d", i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // paced: the veths, not the test, must not drop
		}
	}
	if n := receive(t, peer, relayed, "to-peer-"); n != relayed {
		t.Fatalf("peer received %d of %d datagrams", n, relayed)
	}
	// Peer to client, arriving as ChannelData.
	relayAddr := net.UDPAddrFromAddrPort(c.Relay)
	for i := range relayed {
		if _, err := peer.WriteTo(fmt.Appendf(nil, "to-client-%04d", i), relayAddr); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond)
		}
	}
	if n := receive(t, conn, relayed, "to-client-"); n != relayed {
		t.Fatalf("client received %d of %d datagrams", n, relayed)
	}
	after := scrape()
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		fast := after.Packets("fast", dir) - before.Packets("fast", dir)
		slow := after.Packets("slow", dir) - before.Packets("slow", dir)
		t.Logf("%s: %v packets on the fast path, %v on the slow path", dir, fast, slow)
		if fast < 0.99*relayed {
			t.Errorf("%s: %v of %d packets on the fast path, want >= 99%%", dir, fast, relayed)
		}
	}
}

// receive counts datagrams containing marker until want arrived or 2 s
// pass without one.
func receive(t *testing.T, c net.PacketConn, want int, marker string) int {
	t.Helper()
	buf := make([]byte, 2048)
	n := 0
	for n < want {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, _, err := c.ReadFrom(buf)
		if err != nil {
			break
		}
		if strings.Contains(string(buf[:m]), marker) {
			n++
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	return n
}

// drain reads what is left on c.
func drain(c net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, _, err := c.ReadFrom(buf); err != nil {
			_ = c.SetReadDeadline(time.Time{})
			return
		}
	}
}

// without is caps less one.
func without(caps []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
}
