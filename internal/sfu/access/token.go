// Package access decides who may join the SFU's rooms: join tokens signed
// with a shared secret (JWT, HS256, as LiveKit's access tokens), each
// good for one join, and the limits that keep one source from exhausting
// the server (joins per second per address, rooms, participants per
// room). Every refusal is counted by its reason.
package access

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// MinSecret is the shortest secret taken: HS256's own key size.
const MinSecret = 32

// maxToken bounds a token before any of it is decoded.
const maxToken = 4096

// clockSkew is how far a token's not-before may be ahead of our clock.
const clockSkew = 30 * time.Second

// MaxTTL bounds how far ahead a token's expiry may be: a token joins once
// and its id is remembered until it expires, so this also bounds how long
// the gate remembers it. (A participant stays as long as it likes; the
// expiry bounds when a join, or a reload's rejoin, may start.)
const MaxTTL = 24 * time.Hour

// Grant is what a token allows: joining one room as one identity.
type Grant struct {
	Room     string `json:"room"`
	Identity string `json:"sub"`
	Name     string `json:"name,omitempty"` // shown to the others; the identity if empty
	// Publish: the participant may send media; without it, it joins to
	// receive only (a viewer).
	Publish bool `json:"publish"`
}

// claims are a token's payload: the grant, its validity and its id (jti),
// which makes a token good for one join. A rejoin token (given at a join)
// keeps the id and counts up its generation, so an invitation holds one
// entry of the gate's record however often its tab reloads.
type claims struct {
	Grant
	IssuedAt   int64  `json:"iat"`
	NotBefore  int64  `json:"nbf,omitempty"`
	Expires    int64  `json:"exp"`
	ID         string `json:"jti"`
	Generation int    `json:"gen,omitempty"`
}

var (
	roomName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	header   = b64(`{"alg":"HS256","typ":"JWT"}`)
)

// ValidRoom says whether name is a room name: 1 to 64 letters, digits,
// '-' or '_' (it appears in URLs, logs and metric labels).
func ValidRoom(name string) bool { return roomName.MatchString(name) }

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// Check says what is wrong with a grant, naming the field.
func (g Grant) Check() error {
	switch {
	case !roomName.MatchString(g.Room):
		return fmt.Errorf("room %q: 1 to 64 letters, digits, '-' or '_'", g.Room)
	case g.Identity == "" || len(g.Identity) > 128 || !utf8.ValidString(g.Identity):
		return errors.New("identity: 1 to 128 bytes of UTF-8")
	case len(g.Name) > 128 || !utf8.ValidString(g.Name):
		return errors.New("name: at most 128 bytes of UTF-8")
	}
	return nil
}

// Mint signs a token for g, valid from now for ttl.
func Mint(secret []byte, g Grant, now time.Time, ttl time.Duration) (string, error) {
	if ttl > MaxTTL {
		return "", fmt.Errorf("access: ttl: %v, at most %v", ttl, MaxTTL)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return mint(secret, claims{Grant: g, IssuedAt: now.Unix(), Expires: now.Add(ttl).Unix(), ID: base64.RawURLEncoding.EncodeToString(id)})
}

func mint(secret []byte, c claims) (string, error) {
	if len(secret) < MinSecret {
		return "", fmt.Errorf("access: token secret: at least %d bytes", MinSecret)
	}
	if err := c.Grant.Check(); err != nil {
		return "", fmt.Errorf("access: %w", err)
	}
	if c.Expires <= c.IssuedAt {
		return "", errors.New("access: ttl: want a positive duration")
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	signed := header + "." + base64.RawURLEncoding.EncodeToString(payload)
	return signed + "." + sign(secret, signed), nil
}

func sign(secret []byte, signed string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signed))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// parse checks a token's form, algorithm, signature and validity at now,
// and returns its claims. Which check failed is the Refusal's reason.
func parse(secret []byte, token string, now time.Time) (claims, error) {
	var c claims
	if len(token) > maxToken {
		return c, refused(Malformed, "longer than %d bytes", maxToken)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, refused(Malformed, "not three dot-separated parts")
	}
	var h struct{ Alg string }
	if raw, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(raw, &h) != nil {
		return c, refused(Malformed, "header")
	}
	if h.Alg != "HS256" {
		// Never "none", never an algorithm the key was not meant for.
		return c, refused(Signature, "algorithm %q (want HS256)", h.Alg)
	}
	want := sign(secret, parts[0]+"."+parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return c, refused(Signature, "signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &c) != nil {
		return c, refused(Malformed, "claims")
	}
	switch {
	case c.Grant.Check() != nil:
		return c, refused(Malformed, "%v", c.Grant.Check())
	case c.ID == "" || len(c.ID) > 128:
		return c, refused(Malformed, "jti: every token needs an id (1 to 128 bytes)")
	case c.Expires == 0:
		return c, refused(Malformed, "exp: every token needs an expiry")
	case now.Unix() >= c.Expires:
		return c, refused(Expired, "expired %v ago", now.Sub(time.Unix(c.Expires, 0)).Round(time.Second))
	case time.Unix(c.Expires, 0).Sub(now) > MaxTTL+clockSkew:
		return c, refused(Malformed, "exp: more than %v ahead", MaxTTL)
	case c.Generation < 0:
		return c, refused(Malformed, "gen: negative")
	case c.NotBefore != 0 && now.Add(clockSkew).Unix() < c.NotBefore:
		return c, refused(NotYetValid, "valid from %v", time.Unix(c.NotBefore, 0).UTC())
	}
	return c, nil
}
