package snoop_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

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
	withoutCPU, _ := exchange(t, tb, coturn, nil)

	control := filepath.Join(dir, "offload.sock")
	off, err := tb.StartRelay(bin, "offload", "--iface", testbed.ServerCliIface, "--relay-iface", testbed.ServerPeerIface,
		"--relay-ip", testbed.ServerPeerIP4.String(), "--metrics-listen", testbed.MetricsAddr, "--control-socket", control)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Stop(5 * time.Second) })
	before, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	withCPU, status := exchange(t, tb, coturn, func() string {
		out, err := exec.Command(bin, "offload", "status", "--control-socket", control).CombinedOutput()
		if err != nil {
			t.Fatalf("ebrtc offload status: %v\n%s", err, out)
		}
		return string(out)
	})
	after, err := off.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		if fast := after.Packets("fast", dir) - before.Packets("fast", dir); fast < 0.99*packets {
			t.Errorf("%s: %v of %d packets on the fast path", dir, fast, packets)
		}
	}
	// While the client was live, status listed its allocation and channel with counters.
	if !strings.Contains(status, "1 allocations") || !strings.Contains(status, "channel 0x4") || !strings.Contains(status, fmt.Sprintf("to client %d pkts", countFast(status))) {
		t.Errorf("status:\n%s", status)
	}
	t.Logf("coturn CPU during %d datagrams each way: %v without ebrtc offload, %v with it", packets, withoutCPU, withCPU)
	// /proc counts in 10 ms ticks: allow one, else want under a fifth.
	if withCPU > 10*time.Millisecond && withCPU > withoutCPU/5 {
		t.Errorf("coturn CPU with the offload %v, without %v: want near zero", withCPU, withoutCPU)
	}
}

// exchange allocates through coturn with pion's client, waits until its
// channel is bound, sends packets each way and returns coturn's CPU time
// spent during the traffic, and what status said before the client left.
func exchange(t *testing.T, tb *testbed.Testbed, coturn *testbed.Process, status func() string) (time.Duration, string) {
	t.Helper()
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{
		Server: netip.AddrPortFrom(testbed.ServerClientIP4, 3478), Local: testbed.ClientIP4,
		User: user, Pass: pass, Realm: "ebrtc.test", Family: turn.RequestedAddressFamilyIPv4,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// pion binds its channel in the background after the first datagrams.
	if _, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 50, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
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
	var st string
	if status != nil {
		st = status()
	}
	return cpu1 - cpu0, st
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
