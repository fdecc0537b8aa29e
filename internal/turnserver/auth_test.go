package turnserver

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ebrtc/ebrtc/internal/metrics"
)

func TestAuthStaticAndREST(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var reasons []string
	h := authHandler(map[string]string{"alice": "pw"}, "topsecret", "r", func() time.Time { return now },
		logging.NewDefaultLoggerFactory().NewLogger("t"), func(r string) { reasons = append(reasons, r) })
	ask := func(user string) (string, []byte, bool) {
		return h(&turn.RequestAttributes{Username: user, Realm: "r", SrcAddr: &net.UDPAddr{}})
	}

	id, key, ok := ask("alice")
	if !ok || id != "alice" || string(key) != string(turn.GenerateAuthKey("alice", "r", "pw")) {
		t.Fatalf("static user: %v %v", id, ok)
	}
	valid := fmt.Sprintf("%d:bob", now.Unix()+60)
	id, key, ok = ask(valid)
	if !ok || id != "bob" || string(key) != string(turn.GenerateAuthKey(valid, "r", restPassword("topsecret", valid))) {
		t.Fatalf("REST user: %v %v", id, ok)
	}
	for _, bad := range []string{fmt.Sprintf("%d:bob", now.Unix()-1), fmt.Sprintf("%d:bob", now.Unix()), "mallory", "abc:bob", ""} {
		if _, _, ok := ask(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	// The key depends on the realm: another realm would let a client pick
	// a key of its own making for the same password.
	if _, _, ok := h(&turn.RequestAttributes{Username: "alice", Realm: "other", SrcAddr: &net.UDPAddr{}}); ok {
		t.Error("alice accepted in another realm")
	}
	want := []string{"expired", "expired", "unknown_user", "unknown_user", "unknown_user", "wrong_realm"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("refusal reasons %v, want %v", reasons, want)
	}
}

// The REST password is base64(HMAC-SHA1(secret, username)): check against
// pion's implementation of the same TURN REST API draft.
func TestRESTPasswordMatchesPion(t *testing.T) {
	user, pass, err := turn.GenerateLongTermTURNRESTCredentials("s3", "carol", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := restPassword("s3", user); got != pass {
		t.Fatalf("password %q, pion says %q", got, pass)
	}
}

func TestQuotas(t *testing.T) {
	c := newAllocationCounter(2, 3, nil, metrics.NewEvents())
	q := c.quotaHandler(userIDFor(map[string]string{"alice": "x"}))
	for range 2 {
		if !q("alice", "r", nil) {
			t.Fatal("refused under quota")
		}
		c.created("alice")
	}
	if q("alice", "r", nil) {
		t.Fatal("user quota not enforced")
	}
	if !q("1900000000:bob", "r", nil) {
		t.Fatal("other user refused")
	}
	c.created("bob")
	if q("1900000000:carol", "r", nil) {
		t.Fatal("total quota not enforced")
	}
	c.deleted("alice")
	if !q("alice", "r", nil) {
		t.Fatal("quota not released")
	}
	for reason, want := range map[string]float64{"user_quota": 1, "total_quota": 1} {
		if got := testutil.ToFloat64(c.events.AllocationRefusal.WithLabelValues(reason)); got != want {
			t.Errorf("refusals for %s: %v, want %v", reason, got, want)
		}
	}
}

// One source IP may allocate 2 a second in bursts of 6; others are unaffected.
func TestAllocateRatePerSourceIP(t *testing.T) {
	c := newAllocationCounter(0, 0, newIPRateLimiter(2, 6), metrics.NewEvents())
	q := c.quotaHandler(userIDFor(nil))
	a, b := udp("198.51.100.1:1000"), udp("198.51.100.2:1000")
	for i := range 6 {
		if !q("u", "r", a) {
			t.Fatalf("allocation %d of the burst refused", i)
		}
	}
	if q("u", "r", a) {
		t.Fatal("7th allocation within the burst's time accepted")
	}
	if !q("u", "r", b) {
		t.Fatal("another source IP refused")
	}
	time.Sleep(600 * time.Millisecond) // one more token at 2/s
	if !q("u", "r", a) {
		t.Fatal("not refilled after 0.6 s at 2/s")
	}
	if got := testutil.ToFloat64(c.events.AllocationRefusal.WithLabelValues("ip_rate")); got != 1 {
		t.Errorf("ip_rate refusals: %v, want 1", got)
	}
}
