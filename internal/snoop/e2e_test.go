package snoop_test

import (
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

const (
	user    = "alice"
	pass    = "s3cret"
	packets = 5000
)

// coturn, unmodified, with ebrtc offload beside it: pion's client allocates
// and binds through coturn; the channel is learned from the wire and relayed
// in XDP, and coturn's own CPU time during the traffic drops to near zero.
func TestOffloadCoturn(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "turnserver")
	dir := t.TempDir()
	bin, err := testbed.BuildEbrtc(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := testbed.New()
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	coturn, err := tb.StartCoturn(dir, io.Discard, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coturn.Stop(5 * time.Second) })

	// Without the offload: coturn relays, and its CPU time is the reference.
	c0, peer0 := newFlow(t, tb)
	withoutCPU := exchange(t, coturn, c0, peer0)

	control := filepath.Join(dir, "offload.sock")
	// `ip netns exec` gives the process a private /sys, so its /sys/fs/bpf
	// would vanish with it: pin on a bpffs of our own, which it shares.
	bpffs := filepath.Join(dir, "bpffs")
	if err := os.Mkdir(bpffs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		testenv.Missing(t, "mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bpffs, unix.MNT_DETACH) })
	pins := filepath.Join(bpffs, "offload")
	state := filepath.Join(dir, "state.json")
	args := []string{"offload", "--iface", testbed.ServerCliIface, "--relay-iface", testbed.ServerPeerIface,
		"--relay-ip", testbed.ServerPeerIP4.String(), "--metrics-listen", testbed.MetricsAddr,
		"--control-socket", control, "--pin-dir", pins, "--state-file", state}
	off, err := tb.StartRelay(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Stop(5 * time.Second) })
	status := func() string {
		out, err := exec.Command(bin, "offload", "status", "--control-socket", control).CombinedOutput()
		if err != nil {
			t.Fatalf("ebrtc offload status: %v\n%s", err, out)
		}
		return string(out)
	}

	c, peer := newFlow(t, tb)
	before, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	withCPU := exchange(t, coturn, c, peer)
	after, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		if fast := after.Packets("fast", dir) - before.Packets("fast", dir); fast < 0.99*packets {
			t.Errorf("%s: %v of %d packets on the fast path", dir, fast, packets)
		}
	}
	// Status lists the allocation and its channel with counters.
	if st := status(); !strings.Contains(st, "1 allocations") || !strings.Contains(st, "channel 0x4") || countFast(st) < 0 {
		t.Errorf("status:\n%s", st)
	}
	t.Logf("coturn CPU during %d datagrams each way: %v without ebrtc offload, %v with it", packets, withoutCPU, withCPU)
	// /proc counts in 10 ms ticks: allow one, else want under a fifth.
	if withCPU > 10*time.Millisecond && withCPU > withoutCPU/5 {
		t.Errorf("coturn CPU with the offload %v, without %v: want near zero", withCPU, withoutCPU)
	}

	// The process stops; the pinned fast path goes on relaying.
	if err := off.Stop(5 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, off.Output())
	}
	if cpu := exchange(t, coturn, c, peer); cpu > 10*time.Millisecond && cpu > withoutCPU/5 {
		t.Errorf("with ebrtc offload stopped but pinned, coturn used %v (relayed itself?)", cpu)
	}

	// A new process takes the channel over from the pins and the state file.
	off2, err := tb.StartRelay(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off2.Stop(5 * time.Second) })
	if st := status(); !strings.Contains(st, "1 allocations") || !strings.Contains(st, "channel 0x4") {
		t.Errorf("after restart, status:\n%s", st)
	}
	if err := off2.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Removed, the fast path ends: coturn relays again, without loss.
	if out, err := exec.Command(bin, "offload", "remove", "--pin-dir", pins, "--state-file", state).CombinedOutput(); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if cpu := exchange(t, coturn, c, peer); cpu == 0 {
		t.Errorf("after remove coturn used no CPU: is the fast path still attached?")
	}
}

// newFlow allocates through coturn with pion's client and binds a channel
// to a new peer socket.
func newFlow(t *testing.T, tb *testbed.Testbed) (*testbed.TURNClient, *net.UDPConn) {
	t.Helper()
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
		User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	// pion binds its channel in the background after the first datagrams.
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	return c, peer
}

// exchange sends packets each way without loss and returns coturn's CPU
// time spent meanwhile.
func exchange(t *testing.T, coturn *testbed.Process, c *testbed.TURNClient, peer *net.UDPConn) time.Duration {
	t.Helper()
	cpu0, err := coturn.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, packets, 200, 10000)
	if err != nil || res.Lost() != 0 || res.Corrupt != 0 {
		t.Fatalf("client to peer: %v %v", res, err)
	}
	res, err = testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, packets, 200, 10000)
	if err != nil || res.Lost() != 0 || res.Corrupt != 0 {
		t.Fatalf("peer to client: %v %v", res, err)
	}
	cpu1, _ := coturn.CPUTime()
	return cpu1 - cpu0
}

var toClientRE = regexp.MustCompile(`to client (\d+) pkts`)

// countFast returns the to-client packet count status reported, which must
// be at least 99% of what was sent (the rest spilled to coturn).
func countFast(status string) int {
	m := toClientRE.FindStringSubmatch(status)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	if n < packets*99/100 {
		return -1
	}
	return n
}
