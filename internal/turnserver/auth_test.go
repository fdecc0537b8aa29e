package turnserver

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"
)

func TestAuthStaticAndREST(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := authHandler(map[string]string{"alice": "pw"}, "topsecret", func() time.Time { return now }, logging.NewDefaultLoggerFactory().NewLogger("t"))
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
	c := newAllocationCounter(2, 3)
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
}
