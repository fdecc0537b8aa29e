package snoop_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// coturn, unmodified, with ebrtc offload beside it: pion's client allocates
// and binds through coturn; the channel is learned from the wire and relayed
// in XDP, and coturn's own CPU time during the traffic drops to near zero.
// Pinned, the fast path outlives the process and is taken over by the next.
func TestOffloadCoturn(t *testing.T) {
	testenv.RequireCommand(t, "turnserver")
	tb, bin, dir := setup(t)
	coturn := startCoturn(t, tb, dir)

	// Without the offload: coturn relays, and its CPU time is the reference.
	c0, peer0 := newFlow(t, tb, ipv4Flow)
	withoutCPU := cpuDuring(t, coturn, func() { exchangeByCoturn(t, c0, peer0, packets) })

	bpffs := testenv.BPFFS(t)
	pins, state, control := filepath.Join(bpffs, "offload"), filepath.Join(dir, "state.json"), filepath.Join(dir, "offload.sock")
	adminSock := "unix:" + filepath.Join(dir, "admin.sock")
	off := startOffload(t, tb, bin, "--control-socket", control, "--pin-dir", pins, "--state-file", state, "--admin-listen", adminSock)
	status := func() string {
		out, err := exec.Command(bin, "offload", "status", "--control-socket", control).CombinedOutput()
		if err != nil {
			t.Fatalf("ebrtc offload status: %v\n%s", err, out)
		}
		return string(out)
	}

	c, peer := newFlow(t, tb, ipv4Flow)
	withCPU := cpuDuring(t, coturn, func() { requireFast(t, off, c, peer, packets) })
	// The testbed's far ends run XDP: auto puts XDP in front of TC, and says so.
	if st := status(); !strings.Contains(st, "1 allocations") || !strings.Contains(st, "channel 0x4") || !fastInStatus(st) ||
		!strings.Contains(st, "fast path on "+testbed.ServerCliIface+": xdp+tc (veth peer runs XDP)") {
		t.Errorf("status:\n%s", st)
	}
	requireAdminStatus(t, adminSock, bin)
	t.Logf("coturn CPU during %d datagrams each way: %v without ebrtc offload, %v with it", packets, withoutCPU, withCPU)
	requireNearZero(t, "with the offload", withCPU, withoutCPU)

	// The process stops; the pinned fast path goes on relaying.
	if err := off.Stop(5 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, off.Output())
	}
	requireNearZero(t, "with ebrtc offload stopped but pinned", cpuDuring(t, coturn, func() { exchange(t, c, peer, packets) }), withoutCPU)

	// A new process takes the channel over from the pins and the state file.
	off2 := startOffload(t, tb, bin, "--control-socket", control, "--pin-dir", pins, "--state-file", state)
	if st := status(); !strings.Contains(st, "1 allocations") || !strings.Contains(st, "channel 0x4") {
		t.Errorf("after restart, status:\n%s", st)
	}
	if err := off2.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Removed, the fast path ends: coturn relays again (as without the
	// offload: exchangeByCoturn).
	if out, err := exec.Command(bin, "offload", "remove", "--pin-dir", pins, "--state-file", state).CombinedOutput(); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if cpu := cpuDuring(t, coturn, func() { exchangeByCoturn(t, c, peer, packets) }); cpu == 0 {
		t.Errorf("after remove coturn used no CPU: is the fast path still attached?")
	}
}

// requireNearZero: /proc counts in 10 ms ticks, so allow one; else want
// under a fifth of what coturn used relaying alone.
func requireNearZero(t *testing.T, when string, cpu, alone time.Duration) {
	t.Helper()
	if cpu > 10*time.Millisecond && cpu > alone/5 {
		t.Errorf("coturn CPU %s: %v, relaying alone %v: want near zero", when, cpu, alone)
	}
}

var toClientRE = regexp.MustCompile(`to client (\d+) pkts`)

// fastInStatus: status counted at least 99% of what was sent to the client
// on the fast path (the rest spilled to coturn).
func fastInStatus(status string) bool {
	m := toClientRE.FindStringSubmatch(status)
	if m == nil {
		return false
	}
	n, _ := strconv.Atoi(m[1])
	return n >= packets*99/100
}

// requireAdminStatus: the admin endpoint shows the learned allocation with
// its channel's fast-path counters, and `ebrtc top` renders it.
func requireAdminStatus(t *testing.T, addr, bin string) {
	t.Helper()
	st, err := admin.Fetch(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if st.Server != "offload" || len(st.Allocations) != 1 || len(st.Allocations[0].Channels) != 1 {
		t.Fatalf("admin status: %+v", st)
	}
	// All but the few spilled to coturn (one in 1,000).
	if ch := st.Allocations[0].Channels[0]; !ch.Offload || ch.Fast.ToPeer.Packets < packets*99/100 || ch.Fast.ToClient.Packets < packets*99/100 {
		t.Errorf("channel in the admin status: %+v", ch)
	}
	out, err := exec.Command(bin, "top", "--admin", addr, "--interval", "200ms", "--frames", "1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ebrtc offload") || !strings.Contains(string(out), "0x4") {
		t.Errorf("ebrtc top: %v\n%s", err, out)
	}
}
