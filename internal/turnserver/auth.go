package turnserver

import (
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/turnrest"
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
		expiry, userID, ok := turnrest.Parse(ra.Username)
		if !ok {
			return refuse("unknown_user", "%q from %v is neither a user nor expiry:userid", ra.Username, ra.SrcAddr)
		}
		if !now().Before(expiry) {
			return refuse("expired", "expired ephemeral username %q from %v", ra.Username, ra.SrcAddr)
		}
		return userID, turn.GenerateAuthKey(ra.Username, ra.Realm, turnrest.Password(secret, ra.Username)), true
	}
}
