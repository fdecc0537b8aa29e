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

// Quotas count the user id pion hands over (what the auth handler returned:
// for a TURN REST username its userid part, which may itself contain ':').
func TestQuotas(t *testing.T) {
	c := newAllocationCounter(2, 3, nil, metrics.NewEvents())
	q := c.quotaHandler()
	for range 2 {
		if !q("9:alice", "r", nil) {
			t.Fatal("refused under quota")
		}
		c.created("9:alice")
	}
	if q("9:alice", "r", nil) {
		t.Fatal("user quota not enforced")
	}
	if !q("bob", "r", nil) {
		t.Fatal("other user refused")
	}
	c.created("bob")
	if q("carol", "r", nil) {
		t.Fatal("total quota not enforced")
	}
	c.deleted("9:alice")
	if !q("9:alice", "r", nil) {
		t.Fatal("quota not released")
	}
	for reason, want := range map[string]float64{"user_quota": 1, "total_quota": 1} {
		if got := testutil.ToFloat64(c.events.AllocationRefusal.WithLabelValues(reason)); got != want {
			t.Errorf("refusals for %s: %v, want %v", reason, got, want)
		}
	}
}

// A quota check reserves the slot: Allocates checked at once, before any
// is created, cannot overshoot; a reservation whose allocation never comes
// is given back.
func TestQuotaReservations(t *testing.T) {
	c := newAllocationCounter(2, 0, nil, metrics.NewEvents())
	q := c.quotaHandler()
	if !q("u", "r", nil) || !q("u", "r", nil) {
		t.Fatal("refused under quota")
	}
	if q("u", "r", nil) {
		t.Fatal("a third concurrent Allocate passed a quota of 2")
	}
	c.created("u") // one of the two is created; the other never is
	c.mu.Lock()
	c.pending[0].at = time.Now().Add(-2 * reservationTimeout)
	c.mu.Unlock()
	if !q("u", "r", nil) {
		t.Fatal("a stale reservation still counts")
	}
}

// One source may allocate 2 a second in bursts of 6; others are unaffected.
// An IPv6 source is its /64.
func TestAllocateRatePerSourceIP(t *testing.T) {
	c := newAllocationCounter(0, 0, newIPRateLimiter(2, 6), metrics.NewEvents())
	q := c.quotaHandler()
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
	for i := range 6 {
		if !q("u", "r", udp(fmt.Sprintf("[2001:db8:1:2::%x]:1000", i+1))) {
			t.Fatalf("IPv6 allocation %d of the burst refused", i)
		}
	}
	if q("u", "r", udp("[2001:db8:1:2:ffff::7]:1000")) {
		t.Fatal("another address of the same /64 escaped the limit")
	}
	if !q("u", "r", udp("[2001:db8:1:3::1]:1000")) {
		t.Fatal("another /64 refused")
	}
	if got := testutil.ToFloat64(c.events.AllocationRefusal.WithLabelValues("ip_rate")); got != 2 {
		t.Errorf("ip_rate refusals: %v, want 2", got)
	}
}
