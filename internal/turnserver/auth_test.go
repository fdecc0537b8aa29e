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
	"github.com/ebrtc/ebrtc/internal/turnrest"
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
	if !ok || id != "bob" || string(key) != string(turn.GenerateAuthKey(valid, "r", turnrest.Password("topsecret", valid))) {
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

// Quotas count the user id pion hands over (what the auth handler returned:
// for a TURN REST username its userid part, which may itself contain ':'),
// with scope user wherever its allocations come from.
func TestQuotas(t *testing.T) {
	c := newAllocationCounter(quotas{user: 2, total: 3}, nil, metrics.NewEvents())
	q := c.quotaHandler()
	a1, a2 := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 1}
	for _, src := range []net.Addr{a1, a2} {
		if !q("9:alice", "r", src) {
			t.Fatal("refused under quota")
		}
		c.created("9:alice", src)
	}
	if q("9:alice", "r", a1) {
		t.Fatal("user quota not enforced")
	}
	if !q("bob", "r", a1) {
		t.Fatal("other user refused")
	}
	c.created("bob", a1)
	if q("carol", "r", a1) {
		t.Fatal("total quota not enforced")
	}
	c.deleted("9:alice", a2)
	if !q("9:alice", "r", a1) {
		t.Fatal("quota not released")
	}
	for reason, want := range map[string]float64{"user_quota": 1, "total_quota": 1} {
		if got := testutil.ToFloat64(c.events.AllocationRefusal.WithLabelValues(reason)); got != want {
			t.Errorf("refusals for %s: %v, want %v", reason, got, want)
		}
	}
}

// With scope source (the default), the user quota counts a user's
// allocations per source address, an IPv6 /64 being one: one credential
// shared by an app's clients works, one address cannot take more.
func TestQuotaPerSource(t *testing.T) {
	c := newAllocationCounter(quotas{user: 2, perSource: true}, nil, metrics.NewEvents())
	q := c.quotaHandler()
	at := func(ip string, port int) net.Addr { return &net.UDPAddr{IP: net.ParseIP(ip), Port: port} }
	for i, src := range []net.Addr{at("192.0.2.1", 1), at("192.0.2.1", 2), at("2001:db8::1", 1), at("2001:db8::2", 2)} {
		if !q("app", "r", src) {
			t.Fatalf("allocation %d refused", i)
		}
		c.created("app", src)
	}
	for _, src := range []net.Addr{at("192.0.2.1", 3), at("2001:db8::ffff", 3)} {
		if q("app", "r", src) {
			t.Errorf("a third allocation of one credential from %v's address passed a quota of 2", src)
		}
	}
	for _, src := range []net.Addr{at("192.0.2.9", 1), at("2001:db8:0:1::1", 1), at("::ffff:192.0.2.8", 1)} {
		if !q("app", "r", src) {
			t.Errorf("the credential from another address (%v) refused", src)
		}
		c.created("app", src)
	}
	c.deleted("app", at("192.0.2.1", 1))
	if !q("app", "r", at("192.0.2.1", 4)) {
		t.Error("quota not released")
	}
}

// A quota check reserves the slot: Allocates checked at once, before any
// is created, cannot overshoot; a reservation whose allocation never comes
// is given back.
func TestQuotaReservations(t *testing.T) {
	c := newAllocationCounter(quotas{user: 2}, nil, metrics.NewEvents())
	q := c.quotaHandler()
	if !q("u", "r", nil) || !q("u", "r", nil) {
		t.Fatal("refused under quota")
	}
	if q("u", "r", nil) {
		t.Fatal("a third concurrent Allocate passed a quota of 2")
	}
	c.created("u", nil) // one of the two is created; the other never is
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
	c := newAllocationCounter(quotas{}, newIPRateLimiter(2, 6), metrics.NewEvents())
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
