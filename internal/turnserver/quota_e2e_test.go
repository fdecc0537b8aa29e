package turnserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Out of the box, one credential serves many clients: coturn's own
// turnutils_uclient -m 8 (16 allocations, RTP/RTCP pairs, one address)
// relays all it sends; one address still gets at most the user quota (100)
// of one credential's allocations, while the same credential from another
// address allocates. (With --allocate-rate 0: the source's rate is apart.)
func TestUserQuotaPerSource(t *testing.T) {
	testenv.RequireCommand(t, "turnutils_uclient")
	testenv.RequireCommand(t, "turnutils_peer")
	tb := newTestbed(t)
	r := startRelay(t, tb, "--allocate-rate", "0")
	peer, err := tb.StartTurnutilsPeer()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Stop(2 * time.Second)
	lost, out, err := tb.RunTurnutilsUclient(user, pass, 8, 50, testbed.UclientRTPPairs)
	if err != nil || lost != 0 || strings.Contains(string(out), "486") {
		t.Fatalf("turnutils_uclient -m 8: lost %d, %v\n%s", lost, err, out)
	}
	// uclient's allocations go as it exits; wait for the relay to agree.
	for last, deadline := -1.0, time.Now().Add(10*time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		n := metrics(t, r)["ebrtc_turn_allocations"]
		if n == last || n == 0 {
			break
		}
		last = n
	}
	// (It leaves some to expire: they count, from the same address.)
	left := int(metrics(t, r)["ebrtc_turn_allocations"])
	t.Logf("allocations turnutils_uclient left: %d", left)
	var refused error
	for i := left; i <= 100; i++ {
		c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{Server: server4, Local: testbed.ClientIP4, User: user, Pass: pass, Realm: "ebrtc.test"})
		if err != nil {
			refused = err
			if i != 100 {
				t.Fatalf("allocation %d from one address refused: %v", i+1, err)
			}
			break
		}
		t.Cleanup(c.Close)
	}
	if refused == nil || !strings.Contains(refused.Error(), "486") {
		t.Errorf("the 101st allocation of one credential from one address: %v, want 486 Allocation Quota Reached", refused)
	}
	other := newClientOver(t, tb, testbed.ClientOptions{Server: server6})
	if !other.RelayAddr().IsValid() {
		t.Error("the credential from another address got no relay")
	}
	if n := metrics(t, r)[`ebrtc_turn_allocations_refused_total{reason="user_quota"}`]; n != 1 {
		t.Errorf("user_quota refusals: %v, want 1", n)
	}
}
