package turnserver_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// streamBothWays runs numbered datagrams client->peer and peer->client at
// rate for n datagrams each while during() runs, and requires that none is
// lost, duplicated or corrupted.
func streamBothWays(t *testing.T, c *testbed.TURNClient, peer *net.UDPConn, n, rate int, output func() string, during func()) {
	t.Helper()
	// The permission first: a peer's datagram before it is dropped.
	res, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 16, 200)
	requireExchange(t, "client to peer before the restart", res, err)
	var wg sync.WaitGroup
	results := make([]struct {
		res testbed.Result
		err error
	}, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		results[0].res, results[0].err = testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, n, 200, rate)
	}()
	go func() {
		defer wg.Done()
		results[1].res, results[1].err = testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, n, 200, rate)
	}()
	time.Sleep(time.Duration(n/4) * time.Second / time.Duration(rate)) // a quarter in
	during()
	wg.Wait()
	for i, what := range []string{"client to peer across the restart", "peer to client across the restart"} {
		if res := results[i].res; results[i].err != nil || res.Lost() != 0 || res.Corrupt != 0 || res.Duplicate != 0 {
			t.Errorf("%s: %v %v\n%s", what, res, results[i].err, output())
		}
	}
}

var handedOverRE = regexp.MustCompile(`handed over to pid (\d+)`)

// sighup upgrades the relay in place and returns the successor's pid,
// stopped at the end of the test.
func sighup(t *testing.T, r *testbed.Relay) int {
	t.Helper()
	if err := syscall.Kill(r.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := handedOverRE.FindStringSubmatch(r.Output()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			t.Cleanup(func() { stopPid(t, pid) })
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no hand-over after SIGHUP:\n%s", r.Output())
	return 0
}

func stopPid(t *testing.T, pid int) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 250 {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("pid %d did not stop: killed", pid)
}

// TestUpgradeLosesNothing: SIGHUP starts a successor that takes the
// sockets, the allocations and the fast path over while media streams both
// ways, on the fast path (xdp) and in user space (off): no datagram is lost.
// The client then goes on with the successor: a new permission and a new
// allocation.
func TestUpgradeLosesNothing(t *testing.T) {
	for _, mode := range []string{"xdp", "off"} {
		t.Run(mode, func(t *testing.T) {
			notify := notifySocket(t)
			tb, r, c, peer := streamingRelay(t, mode)
			var successor int
			streamBothWays(t, c, peer, 6000, 2000, r.Output, func() { successor = sighup(t, r) })
			// systemd (Type=notify) learns the new main process.
			// The new main pid before the old process exits (systemd must
			// not see the service's main process end), then ready.
			want := []string{fmt.Sprintf("MAINPID=%d\nREADY=1", r.Pid()), "RELOADING=1",
				fmt.Sprintf("MAINPID=%d", successor), fmt.Sprintf("MAINPID=%d\nREADY=1", successor)}
			for _, w := range want {
				if got := readNotify(t, notify); got != w {
					t.Errorf("systemd notification %q, want %q", got, w)
				}
			}
			if syscall.Kill(r.Pid(), 0) == nil {
				waitGone(t, r.Pid())
			}
			m := metrics(t, r) // the successor's, at the same address
			for k, v := range m {
				if v != 0 && (strings.Contains(k, "dropped") || strings.Contains(k, "socket_drops")) {
					t.Logf("%s %v", k, v)
				}
			}
			if mode == "xdp" {
				if m["ebrtc_xdp_channels"] != 1 {
					t.Errorf("successor's fast path holds %v channels, want 1\n%s", m["ebrtc_xdp_channels"], r.Output())
				}
				// The flows' counters are the predecessor's, carried on.
				if fast := m.Packets("fast", "client_to_peer"); fast < 6000 {
					t.Errorf("fast path counted %v client-to-peer datagrams, want >= 6000", fast)
				}
			}
			if m["ebrtc_turn_allocations"] != 1 {
				t.Errorf("successor holds %v allocations, want 1", m["ebrtc_turn_allocations"])
			}
			requireNewPeerAndClient(t, tb, c)
			if !strings.Contains(r.Output(), "took over 1 of 1 allocations (handed over)") {
				t.Errorf("successor did not report the take-over:\n%s", r.Output())
			}
			if m := regexp.MustCompile(`handed over to pid \d+ \(sockets unread for [^)]*\)`).FindString(r.Output()); m != "" {
				t.Log(m)
			}
		})
	}
}

// requireNewPeerAndClient: the allocation works for a new peer, and a new
// client allocates.
func requireNewPeerAndClient(t *testing.T, tb *testbed.Testbed, c *testbed.TURNClient) {
	t.Helper()
	peerIP2 := netip.MustParseAddr("10.201.2.3")
	testenv.Must(t, tb.Peer.IP("addr", "add", peerIP2.String()+"/24", "dev", testbed.PeerIface))
	peer2 := newPeer(t, tb, peerIP2)
	res, err := testbed.Exchange(c.Relay, peer2.LocalAddr(), peer2, 100, 100)
	requireExchange(t, "client to a new peer after the restart", res, err)
	c2 := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer3 := newPeer(t, tb, testbed.PeerIP4)
	res, err = testbed.Exchange(c2.Relay, peer3.LocalAddr(), peer3, 100, 100)
	requireExchange(t, "a new client after the restart", res, err)
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for range 500 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d still runs after handing over", pid)
}

// keepOffloadArgs pin the fast path in a directory of the test's own.
func keepOffloadArgs(t *testing.T) []string {
	t.Helper()
	pins := testenv.BPFFS(t) + "/turn"
	state := t.TempDir() + "/state.json"
	return []string{"--keep-offload", "--pin-dir", pins, "--state-file", state}
}

// keptRelay is a relay with keep-offload (stopped by the test) and a
// client whose channel to a peer is in the fast path; args start the next.
func keptRelay(t *testing.T) (*testbed.Testbed, []string, *testbed.Relay, *testbed.TURNClient, *net.UDPConn) {
	t.Helper()
	tb := newTestbed(t)
	args := keepOffloadArgs(t)
	r, err := tb.StartRelay(testbed.SharedEbrtc(t), append(testbed.TURNArgs(user+":"+pass), args...)...)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	bindChannel(t, r, c, peer, 1)
	return tb, args, r, c, peer
}

// TestKeepOffloadRestart: stopped with keep-offload, the relay leaves the
// fast path relaying; media on the channel loses nothing while no process
// runs and the next one starts, takes the saved allocation over, and
// serves it (new permission, refresh) with its channel still in the fast
// path.
func TestKeepOffloadRestart(t *testing.T) {
	tb, args, r, c, peer := keptRelay(t)
	var next *testbed.Relay
	streamBothWays(t, c, peer, 8000, 2000, r.Output, func() {
		if err := r.Stop(5 * time.Second); err != nil {
			t.Errorf("stop: %v\n%s", err, r.Output())
		}
		next = startRelay(t, tb, args...)
	})
	if !strings.Contains(r.Output(), "the fast path relays on, 1 allocations saved") {
		t.Errorf("stop did not keep the fast path:\n%s", r.Output())
	}
	if !strings.Contains(next.Output(), "took over 1 of 1 allocations") {
		t.Errorf("restart did not take the allocation over:\n%s", next.Output())
	}
	m := metrics(t, next)
	if m["ebrtc_xdp_channels"] != 1 || m["ebrtc_turn_allocations"] != 1 {
		t.Errorf("after the restart: %v channels, %v allocations; want 1 and 1", m["ebrtc_xdp_channels"], m["ebrtc_turn_allocations"])
	}
	requireNewPeerAndClient(t, tb, c)
}

// TestCrashLeavesNoStaleChannels: a relay with keep-offload killed (no
// state saved) leaves its fast path pinned; the next start removes the
// channels no allocation of its own accounts for, so nothing is relayed
// for the dead allocation.
func TestCrashLeavesNoStaleChannels(t *testing.T) {
	tb, args, r, c, peer := keptRelay(t)
	if err := syscall.Kill(r.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = r.Stop(5 * time.Second)
	// Pinned, the dead relay's channel still relays.
	res, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 100)
	if err != nil || res.Received != 50 {
		t.Fatalf("before the restart the pinned fast path should relay: %v %v", res, err)
	}
	next := startRelay(t, tb, args...)
	if !strings.Contains(next.Output(), "removed 1 fast-path channels no allocation accounts for") {
		t.Errorf("restart did not remove the stale channel:\n%s", next.Output())
	}
	if m := metrics(t, next); m["ebrtc_xdp_channels"] != 0 {
		t.Errorf("%v stale channels left in the fast path", m["ebrtc_xdp_channels"])
	}
	res, err = testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 50, 100, 1000)
	if err != nil || res.Received != 0 {
		t.Errorf("datagrams of the dead allocation relayed after the restart: %v %v", res, err)
	}
}

// notifySocket stands in for systemd's notification socket (NOTIFY_SOCKET).
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	path := t.TempDir() + "/notify"
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 512)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no systemd notification: %v", err)
	}
	return string(buf[:n])
}

// TestUpgradeToBrokenBinary: a SIGHUP whose new binary fails leaves the
// old process serving, losing nothing.
func TestUpgradeToBrokenBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ebrtc")
	tb, r, c, peer := relayFromCopy(t, bin)
	replaceBinary(t, bin, "#!/bin/sh\necho broken >&2\nexit 1\n")
	streamBothWays(t, c, peer, 4000, 2000, r.Output, func() {
		if err := syscall.Kill(r.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, r, "SIGHUP: handover: successor")
	})
	if exited, _ := r.Exited(); exited {
		t.Fatalf("the relay exited:\n%s", r.Output())
	}
	requireNewPeerAndClient(t, tb, c)
}

// relayFromCopy runs a relay from a copy of ebrtc at bin (which the test
// then replaces, as an upgrade does) with a client's channel in the fast path.
func relayFromCopy(t *testing.T, bin string) (*testbed.Testbed, *testbed.Relay, *testbed.TURNClient, *net.UDPConn) {
	t.Helper()
	copyFile(t, testbed.SharedEbrtc(t), bin)
	tb := newTestbed(t)
	r, err := tb.StartRelay(bin, append(testbed.TURNArgs(user+":"+pass), "--offload", "xdp")...)
	r = stopAtCleanup(t, r, err)
	c := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	peer := newPeer(t, tb, testbed.PeerIP4)
	bindChannel(t, r, c, peer, 1)
	return tb, r, c, peer
}

// replaceBinary puts script at bin the way an upgrade does (a new file
// renamed over the old).
func replaceBinary(t *testing.T, bin, script string) {
	t.Helper()
	if err := os.WriteFile(bin+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func waitOutput(t *testing.T, r *testbed.Relay, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(r.Output(), want) {
			return
		}
	}
	t.Fatalf("no %q in the output:\n%s", want, r.Output())
}

// TestUpgradeFailingLate: the new process fails after it has taken the
// state, loaded the fast path on the pinned maps and swapped its program
// in (its admin endpoint cannot bind): the old one takes the fast path
// back and serves on, losing nothing; its fast path still relays and takes
// new channels.
func TestUpgradeFailingLate(t *testing.T) {
	dir := t.TempDir()
	bin, real := filepath.Join(dir, "ebrtc"), filepath.Join(dir, "ebrtc.real")
	copyFile(t, testbed.SharedEbrtc(t), real)
	tb, r, c, peer := relayFromCopy(t, bin)
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	replaceBinary(t, bin, fmt.Sprintf("#!/bin/sh\nexec %s \"$@\" --admin-listen unix:%s/admin.sock\n", real, notDir))
	before := metrics(t, r)
	streamBothWays(t, c, peer, 6000, 2000, r.Output, func() {
		if err := syscall.Kill(r.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, r, "serving on")
	})
	if !strings.Contains(r.Output(), "took over 1 of 1 allocations") {
		t.Errorf("the new process did not get as far as the take-over:\n%s", r.Output())
	}
	t.Logf("%s", firstLineWith(r.Output(), "serving on"))
	after := metrics(t, r)
	if fast := after.Packets("fast", "client_to_peer") - before.Packets("fast", "client_to_peer"); fast < 5000 {
		t.Errorf("fast path relayed %v of 6,000 client-to-peer datagrams across the failed upgrade", fast)
	}
	requireNewPeerAndClient(t, tb, c)
	if m := metrics(t, r); m["ebrtc_xdp_channels"] < 2 {
		t.Errorf("the old process's fast path holds %v channels after new ones were bound, want 2 or more", m["ebrtc_xdp_channels"])
	}
}

func firstLineWith(s, substr string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}
