package turnserver_test

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TestAdminAndTop: the admin endpoint shows the allocation, its channel on
// the fast path with the channel's BPF counters, and the user's totals;
// `ebrtc top` renders them with rates; the per-user and per-allocation
// series count the fast path too, and a user's counters do not fall when
// its allocation ends.
func TestAdminAndTop(t *testing.T) {
	sock := "unix:" + t.TempDir() + "/admin.sock"
	_, r, c, peer := streamingRelay(t, "xdp", "--admin-listen", sock, "--metrics-labels", "allocation")
	res, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 2000, 200)
	requireExchange(t, "client to peer", res, err)
	res, err = testbed.Exchange(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 1000, 200)
	requireExchange(t, "peer to client", res, err)

	st, err := admin.Fetch(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Server != "turn" || len(st.Interfaces) != 2 || len(st.Allocations) != 1 || len(st.Users) != 1 {
		t.Fatalf("status: %+v", st)
	}
	a := st.Allocations[0]
	if a.User != user || a.Relay != c.RelayAddr() || len(a.Channels) != 1 || !a.Channels[0].Offload {
		t.Fatalf("allocation: %+v", a)
	}
	// (A datagram right after the bind may still take the slow path while
	// the channel's fast-path entry goes in: 1 of 2,000 did in one loaded
	// run. The exchange itself lost nothing.)
	if ch := a.Channels[0]; ch.Fast.ToPeer.Packets < 1990 || ch.Fast.ToClient.Packets < 995 || ch.Fast.ToPeer.Bytes < 1990*200 {
		t.Errorf("channel's fast-path counters: %+v", ch.Fast)
	}
	if u := st.Users[0]; u.Name != user || u.Allocations != 1 || u.Fast.ToPeer.Packets < 1990 || u.Slow.ToPeer.Packets == 0 {
		t.Errorf("user (the channel was bound on the slow path first): %+v", u)
	}

	// top: one frame, rates over a second of steady client-to-peer traffic.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 3000, 200, 1000)
	}()
	time.Sleep(500 * time.Millisecond)
	out, err := exec.Command(testbed.SharedEbrtc(t), "top", "--admin", sock, "--interval", "1s", "--frames", "1").CombinedOutput()
	<-done
	if err != nil {
		t.Fatalf("ebrtc top: %v\n%s", err, out)
	}
	frame := string(out)
	t.Logf("ebrtc top:\n%s", frame)
	for _, want := range []string{"ebrtc turn", "fast path on eth-cli", "USER", user, c.RelayAddr().String(), "0x4000"} {
		if !strings.Contains(frame, want) {
			t.Errorf("top's frame lacks %q", want)
		}
	}
	// The channel's row: fast, with a client-to-peer rate (about 1000/s).
	row := regexp.MustCompile(`0x4000\s+\S+\s+fast\s+(\S+)`).FindStringSubmatch(frame)
	if row == nil || row[1] == "0" || row[1] == "-" {
		t.Errorf("no client-to-peer rate on the fast channel's row: %v", row)
	}

	m := metrics(t, r)
	fast := `ebrtc_turn_user_packets_total{direction="client_to_peer",path="fast",user="` + user + `"}`
	if m[fast] < 4975 { // the 2,000 and 3,000 sent, at 99.5% as above (4,998 in one loaded run)
		t.Errorf("%s = %v, want >= 4975", fast, m[fast])
	}
	alloc := `ebrtc_turn_allocation_packets_total{client="` + a.Client.String() + `",direction="peer_to_client",path="fast",relay="` +
		a.Relay.String() + `",user="` + user + `"}`
	// At 99.5% too: a datagram the fast path hands to the kernel (one
	// with a partial checksum did in a clean-clone run: "checksum_offload
	// (1)" in top's frame) is relayed on the slow path.
	if m[alloc] < 995 {
		t.Errorf("%s = %v, want >= 995", alloc, m[alloc])
	}
	// The allocation ends: the user's counter keeps what it relayed.
	c.Close()
	after := waitMetric(t, r, "the allocation's end", func(m testbed.Metrics) bool { return m["ebrtc_turn_allocations"] == 0 })
	if after[fast] < m[fast] {
		t.Errorf("%s fell from %v to %v when the allocation ended", fast, m[fast], after[fast])
	}
	if _, ok := after[alloc]; ok {
		t.Errorf("the ended allocation's series is still exported")
	}
}

// Without the fast path the same views count the slow path (and a scrape
// with per-user series works: no engine to read).
func TestAdminWithoutFastPath(t *testing.T) {
	sock := "unix:" + t.TempDir() + "/admin.sock"
	_, r, c, peer := streamingRelay(t, "off", "--admin-listen", sock, "--metrics-labels", "user")
	res, err := testbed.Exchange(c.Relay, peer.LocalAddr(), peer, 500, 200)
	requireExchange(t, "client to peer", res, err)
	st, err := admin.Fetch(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Interfaces) != 0 || len(st.Allocations) != 1 || len(st.Allocations[0].Channels) != 1 || st.Allocations[0].Channels[0].Offload {
		t.Fatalf("status: %+v", st)
	}
	if a := st.Allocations[0]; a.Slow.ToPeer.Packets < 500 || a.Fast.ToPeer.Packets != 0 {
		t.Errorf("allocation's traffic: fast %+v slow %+v", a.Fast, a.Slow)
	}
	slow := `ebrtc_turn_user_packets_total{direction="client_to_peer",path="slow",user="` + user + `"}`
	if m := metrics(t, r); m[slow] < 500 {
		t.Errorf("%s = %v, want >= 500", slow, m[slow])
	}
}
