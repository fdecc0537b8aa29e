package turnserver

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"  //nolint:gosec // RFC 8489 long-term credential key
	"crypto/sha1" //nolint:gosec // TURN REST API password
	"encoding/base64"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/turnrest"
)

// oracleREST reads a TURN REST username "expiry[:userid]" on its own: the
// expiry is a positive decimal UNIX time (an optional '+' as strconv
// allows), the user id what follows the first ':' or, when that is empty,
// the whole username.
func oracleREST(username string) (expiry int64, userID string, ok bool) {
	ts, user, _ := strings.Cut(username, ":")
	ts = strings.TrimPrefix(ts, "+")
	if ts == "" {
		return 0, "", false
	}
	for _, c := range []byte(ts) {
		if c < '0' || c > '9' {
			return 0, "", false
		}
		d := int64(c - '0')
		if expiry > (math.MaxInt64-d)/10 {
			return 0, "", false // does not fit a UNIX time
		}
		expiry = expiry*10 + d
	}
	if expiry == 0 {
		return 0, "", false
	}
	if user == "" {
		user = username
	}
	return expiry, user, true
}

// longTermKey is MD5(username:realm:password) (RFC 8489 9.2.2).
func longTermKey(username, realm, password string) []byte {
	h := md5.Sum([]byte(username + ":" + realm + ":" + password)) //nolint:gosec
	return h[:]
}

// FuzzRESTUsername: authHandler, given any username and realm, never
// panics; a request in another realm than the server's is refused (the key
// depends on it); a configured user gets its own key; without a secret
// nothing else passes; with one, exactly the well-formed, unexpired
// "expiry:userid" usernames pass, with the key of the password
// base64(HMAC-SHA1(secret, username)) computed here independently; every
// refusal, and only a refusal, is reported once with its reason. (pion hands
// the quota handler the user id returned here; TestQuotas counts by it.)
func FuzzRESTUsername(f *testing.F) {
	const now = 1_800_000_000
	f.Add("topsecret", "1800000060:bob", "ebrtc", "ebrtc", "alice", "pw", int64(now))
	f.Add("topsecret", "1800000000:bob", "ebrtc", "ebrtc", "alice", "pw", int64(now))
	f.Add("topsecret", "1799999999:bob", "r", "r", "", "", int64(now))
	f.Add("topsecret", "alice", "r", "r", "alice", "pw", int64(now))
	f.Add("topsecret", "alice", "r", "other", "alice", "pw", int64(now))
	f.Add("topsecret", "1900000000:bob", "r", "R", "", "", int64(now))
	f.Add("", "1900000000:bob", "r", "r", "alice", "pw", int64(now))
	f.Add("s", "1900000000", "r", "r", "", "", int64(now))
	f.Add("s", "1900000000:", "r", "r", "", "", int64(now))
	f.Add("s", "+1900000000:x:y", "r", "r", "", "", int64(now))
	f.Add("s", "-5:bob", "r", "r", "", "", int64(-10))
	f.Add("s", "99999999999999999999:bob", "r", "r", "", "", int64(now))
	f.Add("s", "abc:bob", "", "", "", "", int64(now))
	f.Add("s", "", "", "", "", "", int64(0))

	logger := logging.NewDefaultLoggerFactory().NewLogger("fuzz")
	f.Fuzz(func(t *testing.T, secret, username, realm, serverRealm, staticName, staticPass string, nowUnix int64) {
		users := map[string]string{}
		if staticName != "" && staticPass != "" {
			users[staticName] = staticPass
		}
		clock := time.Unix(nowUnix, 0)
		var reasons []string
		h := authHandler(users, secret, serverRealm, func() time.Time { return clock }, logger,
			func(r string) { reasons = append(reasons, r) })
		id, key, ok := h(&turn.RequestAttributes{Username: username, Realm: realm, SrcAddr: &net.UDPAddr{}})
		if !ok && (id != "" || key != nil) {
			t.Fatalf("refused %q but returned id %q key %x", username, id, key)
		}
		if ok && len(reasons) != 0 || !ok && len(reasons) != 1 {
			t.Fatalf("%q: ok %v with refusal reasons %q", username, ok, reasons)
		}
		if realm != serverRealm {
			if ok || reasons[0] != "wrong_realm" {
				t.Fatalf("%q in realm %q accepted by the server of realm %q (reasons %q)", username, realm, serverRealm, reasons)
			}
			return
		}

		expiry, restUser, wellFormed := oracleREST(username)
		exp, user, parsed := turnrest.Parse(username)
		// time.Unix wraps past MaxInt64-62135596800 (year ~292e9): such an
		// expiry may read as any time (a refusal is then fine, see below).
		huge := expiry > math.MaxInt64-62135596800
		if parsed != wellFormed || (parsed && ((!huge && exp.Unix() != expiry) || user != restUser)) {
			t.Fatalf("parseRESTUsername(%q) = %v %q %v, want %d %q %v", username, exp.Unix(), user, parsed, expiry, restUser, wellFormed)
		}

		switch pass, static := users[username]; {
		case static:
			if !ok || id != username || !bytes.Equal(key, longTermKey(username, realm, pass)) {
				t.Fatalf("configured user %q: ok %v id %q key %x", username, ok, id, key)
			}
		case secret == "":
			if ok {
				t.Fatalf("%q accepted with no secret and no such user", username)
			}
		case !wellFormed || expiry <= nowUnix:
			if ok {
				t.Fatalf("malformed or expired REST username %q accepted at %d (id %q)", username, nowUnix, id)
			}
			if want := map[bool]string{true: "expired", false: "unknown_user"}[wellFormed]; reasons[0] != want {
				t.Fatalf("%q refused as %q, want %q", username, reasons[0], want)
			}
		case huge && !ok:
			// An expiry beyond what time.Time holds may be refused.
		default:
			mac := hmac.New(sha1.New, []byte(secret))
			mac.Write([]byte(username))
			password := base64.StdEncoding.EncodeToString(mac.Sum(nil))
			if !ok || id != restUser || !bytes.Equal(key, longTermKey(username, realm, password)) {
				t.Fatalf("valid REST username %q (expires %d, now %d): ok %v id %q (want %q), key %x (want %x)",
					username, expiry, nowUnix, ok, id, restUser, key, longTermKey(username, realm, password))
			}
		}
	})
}
