package turnserver

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // RFC 8489 long-term credentials and the TURN REST API use SHA-1
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"
)

// authHandler accepts configured long-term users and, with a secret, TURN
// REST API ephemeral credentials (username "expiry:userid", password
// base64(HMAC-SHA1(secret, username))), in the server's realm only. The
// returned user id is what quotas count: the name, or the userid part of an
// ephemeral username. fail hears the reason of every refusal.
func authHandler(users map[string]string, secret, realm string, now func() time.Time, log logging.LeveledLogger,
	fail func(reason string)) turn.AuthHandler {
	refuse := func(reason, format string, args ...any) (string, []byte, bool) {
		log.Debugf("auth: "+format, args...) // counted; a flood must not flood the log
		fail(reason)
		return "", nil, false
	}
	return func(ra *turn.RequestAttributes) (string, []byte, bool) {
		// The key depends on the realm, so a client could otherwise pick one.
		if ra.Realm != realm {
			return refuse("wrong_realm", "realm %q from %v (%q), want %q", ra.Realm, ra.SrcAddr, ra.Username, realm)
		}
		if pass, ok := users[ra.Username]; ok {
			return ra.Username, turn.GenerateAuthKey(ra.Username, ra.Realm, pass), true
		}
		if secret == "" {
			return refuse("unknown_user", "unknown user %q from %v", ra.Username, ra.SrcAddr)
		}
		expiry, userID, ok := parseRESTUsername(ra.Username)
		if !ok {
			return refuse("unknown_user", "%q from %v is neither a user nor expiry:userid", ra.Username, ra.SrcAddr)
		}
		if !now().Before(expiry) {
			return refuse("expired", "expired ephemeral username %q from %v", ra.Username, ra.SrcAddr)
		}
		return userID, turn.GenerateAuthKey(ra.Username, ra.Realm, restPassword(secret, ra.Username)), true
	}
}

func parseRESTUsername(username string) (expiry time.Time, userID string, ok bool) {
	ts, user, _ := strings.Cut(username, ":")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, "", false
	}
	if user == "" {
		user = username
	}
	return time.Unix(sec, 0), user, true
}

// restPassword is the TURN REST API password for an ephemeral username.
func restPassword(secret, username string) string {
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
