package turnrest

import (
	"testing"
	"time"

	"github.com/pion/turn/v5"
)

// The REST password is base64(HMAC-SHA1(secret, username)): checked
// against pion's implementation of the same TURN REST API draft.
func TestPasswordMatchesPion(t *testing.T) {
	user, pass, err := turn.GenerateLongTermTURNRESTCredentials("s3", "carol", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := Password("s3", user); got != pass {
		t.Fatalf("password %q, pion says %q", got, pass)
	}
}

// Mint's username parses back to its expiry and user (a userid may hold
// ':'), and its password is the username's.
func TestMintParses(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	user, pass := Mint("secret", "room:ann", now, time.Hour)
	expiry, id, ok := Parse(user)
	if !ok || !expiry.Equal(now.Add(time.Hour)) || id != "room:ann" || pass != Password("secret", user) {
		t.Errorf("minted %q %q: parsed %v %q %v", user, pass, expiry, id, ok)
	}
	if _, _, ok := Parse("ann"); ok {
		t.Error("a plain username parsed as ephemeral")
	}
}
