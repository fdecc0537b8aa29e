package turnserver_test

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST API's HMAC
	"encoding/base64"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// Authentication refusals, each counted by reason: a wrong password, an
// unknown user, another realm, an expired TURN REST username; and nonces
// that expire (--stale-nonce), answered 438 until the client takes the new one.
func TestAuthRefusalsCounted(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--auth-secret", "topsecret", "--stale-nonce", "3s")
	restUser := func(expiry time.Time, id string) (string, string) {
		name := fmt.Sprintf("%d:%s", expiry.Unix(), id)
		mac := hmac.New(sha1.New, []byte("topsecret"))
		mac.Write([]byte(name))
		return name, base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	allocate := func(o turnclient.Options) (*turnclient.Client, error) {
		conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		testenv.Must(t, err)
		t.Cleanup(func() { conn.Close() })
		return turnclient.AllocateWith(conn, server4, o)
	}
	expiredName, expiredPass := restUser(time.Now().Add(-time.Minute), "carol")
	validName, validPass := restUser(time.Now().Add(time.Hour), "dave")

	for _, tc := range []struct {
		name   string
		o      turnclient.Options
		reason string
	}{
		{"wrong password", turnclient.Options{User: user, Password: "wrong"}, "bad_integrity"},
		{"unknown user", turnclient.Options{User: "mallory", Password: "x"}, "unknown_user"},
		{"another realm", turnclient.Options{User: user, Password: pass, Realm: "evil.example"}, "wrong_realm"},
		{"expired REST username", turnclient.Options{User: expiredName, Password: expiredPass}, "expired"},
	} {
		before := metrics(t, r)[authFailures(tc.reason)]
		if _, err := allocate(tc.o); err == nil {
			t.Errorf("%s: allocation granted", tc.name)
		}
		if got := metrics(t, r)[authFailures(tc.reason)] - before; got != 1 {
			t.Errorf("%s: %v refusals counted as %s, want 1", tc.name, got, tc.reason)
		}
	}
	if _, err := allocate(turnclient.Options{User: validName, Password: validPass}); err != nil {
		t.Fatalf("a valid REST username was refused: %v", err)
	}

	c, err := allocate(turnclient.Options{User: user, Password: pass})
	testenv.Must(t, err)
	c.KeepNonce = true
	testenv.Must(t, c.Refresh(time.Minute)) // the nonce is fresh
	time.Sleep(4 * time.Second)
	if err := c.Refresh(time.Minute); turnclient.Code(err) != 438 {
		t.Fatalf("refresh with a 4 s old nonce (lifetime 3 s): %v, want 438 Stale Nonce", err)
	}
	if n := metrics(t, r)[authFailures("stale_nonce")]; n != 1 {
		t.Errorf("stale nonces counted: %v, want 1", n)
	}
	c.KeepNonce = false
	if err := c.Refresh(time.Minute); err != nil {
		t.Fatalf("refresh with the nonce of the 438: %v", err)
	}
}

func authFailures(reason string) string {
	return `ebrtc_turn_auth_failures_total{reason="` + reason + `"}`
}
