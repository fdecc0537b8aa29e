// Package turnrest is the TURN REST API's ephemeral credentials
// (draft-uberti-behave-turn-rest, as coturn's use-auth-secret and ebrtc
// turn's auth-secret take them): username "expiry:userid" (expiry in Unix
// seconds), password base64(HMAC-SHA1(secret, username)). A service that
// shares the secret with the TURN server (ebrtc sfu) mints them for its
// users; the server checks them without a database.
package turnrest

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST API's HMAC is SHA-1
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Password is the password of an ephemeral username.
func Password(secret, username string) string {
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Mint is userID's credential valid until now+ttl.
func Mint(secret, userID string, now time.Time, ttl time.Duration) (username, password string) {
	username = strconv.FormatInt(now.Add(ttl).Unix(), 10) + ":" + userID
	return username, Password(secret, username)
}

// Parse reads an ephemeral username: its expiry and its userid (the whole
// username when it has none); false when it is not one.
func Parse(username string) (expiry time.Time, userID string, ok bool) {
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
