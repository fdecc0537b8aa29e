package testbed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
)

// MetricsAddr is where a relay in the server ns serves Prometheus metrics.
const MetricsAddr = "127.0.0.1:9641"

// BuildEbrtc compiles cmd/ebrtc into dir and returns the binary's path.
func BuildEbrtc(dir string) (string, error) {
	bin := filepath.Join(dir, "ebrtc")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ebrtc/ebrtc/cmd/ebrtc").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// TURNArgs are the `ebrtc turn` flags that fit the testbed; extra flags
// (e.g. --offload off) are appended by callers.
func TURNArgs(users ...string) []string {
	args := []string{"turn",
		"--listen", "udp://10.201.1.1:3478", "--listen", "udp://[fd00:201:1::1]:3478",
		"--relay-ip", ServerPeerIP4.String(), "--relay-ip", ServerPeerIP6.String(),
		"--metrics-listen", MetricsAddr, "--realm", "ebrtc.test",
	}
	for _, p := range Prefixes {
		args = append(args, "--allow-peer", p)
	}
	for _, u := range users {
		args = append(args, "--user", u)
	}
	return args
}

// Where `ebrtc sfu` serves in the testbed (SFUArgs): its web server and
// media socket on the client side of the server namespace.
var (
	SFUWeb   = netip.AddrPortFrom(ServerClientIP4, 8088)
	SFUMedia = netip.AddrPortFrom(ServerClientIP4, 40000)
)

// SFUArgs are the `ebrtc sfu` flags that fit the testbed, with the data
// plane named (ebpf, at TC ingress of the client-side interface, or user).
func SFUArgs(plane string) []string {
	args := EncryptedSFUArgs(plane)
	return slices.Insert(args, 1, "--unencrypted-media") // after the subcommand
}

// EncryptedSFUArgs are SFUArgs with ebrtc sfu's default media: DTLS-SRTP
// (the user data plane).
func EncryptedSFUArgs(plane string) []string {
	args := []string{"sfu", "--http", "--media", SFUMedia.String(), "--listen", SFUWeb.String(),
		"--metrics-listen", MetricsAddr, "--dataplane", plane, "--token-secret", SFUTokenSecret,
		"--join-rate", strconv.Itoa(SFUJoinRate), "--join-burst", strconv.Itoa(SFUJoinRate)}
	if plane == "ebpf" {
		args = append(args, "--iface", ServerCliIface)
	}
	return args
}

// SFUTokenSecret signs the testbed SFU's join tokens (SFUArgs pass it):
// participants join as a meeting app's users do, each with a token.
const SFUTokenSecret = "ebrtc-testbed-join-token-secret-0123456789"

// SFUJoinRate is the testbed SFU's joins a second (and at once) from one
// address: a testbed host holds up to hundreds of synthetic participants,
// where the default (5 a second, 20 at once) fits a site behind one NAT.
const SFUJoinRate = 500

// SFUToken is a join token for the testbed SFU: identity joins room as a
// publisher, for an hour.
func SFUToken(room, identity string) string {
	tok, err := access.Mint([]byte(SFUTokenSecret), access.Grant{Room: room, Identity: identity, Publish: true}, time.Now(), time.Hour)
	if err != nil {
		panic(err) // the room or identity of a test's own making
	}
	return tok
}

// SFUTokens gives a token for room at each call, each for an identity
// never given before (synth.Config.Token).
func SFUTokens(room string) func() string {
	return func() string { return SFUToken(room, fmt.Sprintf("synth-%d", synthIdentities.Add(1))) }
}

var synthIdentities atomic.Int64

// SFUPageURLs are n participants' addresses of the meeting page at base
// (e.g. http://10.201.1.1:8088/?maxKbps=500), each with a token of its
// own (identities p0, p1, ...).
func SFUPageURLs(base, room string, n int) []string {
	urls := make([]string, n)
	for i := range urls {
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		urls[i] = base + sep + "token=" + SFUToken(room, "p"+strconv.Itoa(i))
	}
	return urls
}

// Relay is a relay process in the server namespace with its output kept.
type Relay struct {
	*Process
	ns  *netns.NS
	out *LineBuffer
}

// StartRelay runs bin with args in the server ns and waits for its "ready" line.
func (tb *Testbed) StartRelay(bin string, args ...string) (*Relay, error) {
	out := &LineBuffer{}
	p, err := Start(tb.Server, out, bin, args...)
	if err != nil {
		return nil, err
	}
	r := &Relay{Process: p, ns: tb.Server, out: out}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(out.String(), "ready\n") {
			return r, nil
		}
		if exited, err := p.Exited(); exited {
			return nil, fmt.Errorf("relay exited (%v):\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.Stop(time.Second)
	return nil, fmt.Errorf("relay not ready after 15s:\n%s", out.String())
}

// Output is everything the relay printed so far.
func (r *Relay) Output() string { return r.out.String() }

// Metrics scrapes the relay's Prometheus endpoint into "name{labels}" -> value.
func (r *Relay) Metrics() (Metrics, error) { return ScrapeMetrics(r.ns, MetricsAddr) }

// ScrapeMetrics reads http://addr/metrics from inside ns.
func ScrapeMetrics(ns *netns.NS, addr string) (Metrics, error) {
	conn, err := DialTCP(ns, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Metrics are scraped samples keyed by name and labels as exposed,
// e.g. `ebrtc_turn_packets_total{direction="client_to_peer",path="fast"}`.
type Metrics map[string]float64

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics: bad line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: bad value in %q", line)
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// Packets is ebrtc_turn_packets_total for a path and direction.
func (m Metrics) Packets(path, direction string) float64 {
	return m[fmt.Sprintf(`ebrtc_turn_packets_total{direction=%q,path=%q}`, direction, path)]
}

// SFUOutcome is ebrtc_sfu_datagrams_total for one outcome (named as
// dataplane.Outcome's String names it).
func (m Metrics) SFUOutcome(name string) float64 {
	return m[fmt.Sprintf(`ebrtc_sfu_datagrams_total{outcome=%q}`, name)]
}

// AFXDPPaths is what AF_XDP conns received (ebrtc_afxdp_datagrams_total)
// through AF_XDP and through their kernel sockets, and of the latter what
// the classifier must hand the kernel as a partial checksum (a full one
// equals the pseudo-header sum 1 time in 65,536 by chance; bpf/udp.h).
func (m Metrics) AFXDPPaths() (xdp, kernel, partialChecksum float64) {
	return m.Labeled("ebrtc_afxdp_datagrams_total", map[string]string{"path": "xdp"}),
		m.Labeled("ebrtc_afxdp_datagrams_total", map[string]string{"path": "kernel"}),
		m.Labeled("ebrtc_afxdp_outcome_packets_total", map[string]string{"outcome": "fallback_partial_checksum"})
}

// Outcome is ebrtc_xdp_packets_total for one outcome.
func (m Metrics) Outcome(name string) float64 {
	return m[fmt.Sprintf(`ebrtc_xdp_packets_total{outcome=%q}`, name)]
}

// Labeled sums the samples of metric name whose labels include every one
// in want (others may differ: a reason, say).
func (m Metrics) Labeled(name string, want map[string]string) float64 {
	var sum float64
	for key, v := range m {
		if !strings.HasPrefix(key, name+"{") {
			continue
		}
		ok := true
		for k, val := range want {
			if !strings.Contains(key, fmt.Sprintf("%s=%q", k, val)) {
				ok = false
				break
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// LineBuffer collects a process's output, safe for concurrent use, for
// waiting on and reading its lines.
type LineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Find returns the rest of the first line starting with prefix.
func (b *LineBuffer) Find(prefix string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// Wait waits for a line starting with line, or p to exit.
func (b *LineBuffer) Wait(line string, timeout time.Duration, p *Process) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, ok := b.Find(line); ok {
			return nil
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("exited (%v):\n%s", err, b.String())
		}
	}
	return errors.New("not " + line + " after " + timeout.String() + ":\n" + b.String())
}

// sharedEbrtc is the binary SharedEbrtc built for this test process.
var sharedEbrtc struct {
	once     sync.Once
	dir, bin string
	err      error
}

// SharedEbrtc builds ebrtc once for the test process (BuildEbrtc) and
// returns the binary, for the package's tests to share (a build is about
// 3 s); RunTests, the package's TestMain, removes it.
func SharedEbrtc(t testing.TB) string {
	t.Helper()
	s := &sharedEbrtc
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "ebrtc-bin"); s.err == nil {
			s.bin, s.err = BuildEbrtc(s.dir)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.bin
}

// RunTests runs a package's tests (TestMain's m.Run) and removes what
// SharedEbrtc built.
func RunTests(m *testing.M) int {
	code := m.Run()
	if sharedEbrtc.dir != "" {
		os.RemoveAll(sharedEbrtc.dir)
	}
	return code
}
