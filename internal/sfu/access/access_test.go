package access

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func reason(err error) Reason {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// A token is a standard HS256 JWT: its signature is HMAC-SHA256 over the
// first two parts, computed here apart from the package's own code, and
// its claims read back as minted.
func TestTokenIsHS256JWT(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := Grant{Room: "r-1", Identity: "alice@example.com", Name: "Alice Ö", Publish: true}
	tok, err := Mint(key, g, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	m := hmac.New(sha256.New, key)
	m.Write([]byte(parts[0] + "." + parts[1]))
	if base64.RawURLEncoding.EncodeToString(m.Sum(nil)) != parts[2] {
		t.Fatal("the signature is not HMAC-SHA256 of header.payload")
	}
	c, err := parse(key, tok, now.Add(59*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Grant != g || c.Expires != now.Add(time.Hour).Unix() || c.IssuedAt != now.Unix() || len(c.ID) < 20 {
		t.Errorf("claims %+v", c)
	}
	if _, err := parse(key, tok, now.Add(time.Hour)); reason(err) != Expired {
		t.Errorf("at its expiry: %v", err)
	}
	for _, bad := range []Grant{{Room: "a b", Identity: "x"}, {Room: "r"}, {Room: "r", Identity: strings.Repeat("x", 129)}, {Room: "r", Identity: "x", Name: "\xff"}} {
		if _, err := Mint(key, bad, now, time.Hour); err == nil {
			t.Errorf("minted %+v", bad)
		}
	}
	if _, err := Mint(key[:31], g, now, time.Hour); err == nil {
		t.Error("minted with a 31-byte secret")
	}
}

// A token refused is refused for the right reason, with nothing decoded
// before its signature is checked.
func TestTokenRefusals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	sign := func(payload string) string {
		signed := header + "." + b64(payload)
		m := hmac.New(sha256.New, key)
		m.Write([]byte(signed))
		return signed + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	for _, c := range []struct {
		name, token string
		want        Reason
	}{
		{"empty", "", Malformed},
		{"two parts", "a.b", Malformed},
		{"huge", strings.Repeat("a", maxToken+1), Malformed},
		{"HS512", b64(`{"alg":"HS512"}`) + ".e30.x", Signature},
		{"none", b64(`{"alg":"none"}`) + ".e30.", Signature},
		{"no jti", sign(`{"room":"r","sub":"a","exp":1800003600}`), Malformed},
		{"no exp", sign(`{"room":"r","sub":"a","jti":"j"}`), Malformed},
		{"no identity", sign(`{"room":"r","exp":1800003600,"jti":"j"}`), Malformed},
		{"not yet", sign(`{"room":"r","sub":"a","exp":1800003600,"nbf":1800000100,"jti":"j"}`), NotYetValid},
		{"payload not JSON, signed", sign("not json"), Malformed},
		{"payload not JSON, unsigned", header + ".bm90IGpzb24." + strings.Split(sign("x"), ".")[2], Signature},
		{"a year ahead", sign(`{"room":"r","sub":"a","exp":1831536000,"jti":"j"}`), Malformed},
		{"negative generation", sign(`{"room":"r","sub":"a","exp":1800000100,"jti":"j","gen":-1}`), Malformed},
	} {
		if _, err := parse(key, c.token, now); reason(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if _, err := parse(key, sign(`{"room":"r","sub":"a","exp":1800003600,"nbf":1800000020,"jti":"j"}`), now); err != nil {
		t.Errorf("a not-before within the clock skew: %v", err)
	}
}

// Joins per address: a burst, then the rate; an IPv6 /64 is one source,
// another address is not slowed; the addresses remembered are bounded.
func TestAdmit(t *testing.T) {
	g, err := New(Config{Open: true, JoinRate: 2, JoinBurst: 3, MaxTracked: 4})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	a := netip.MustParseAddr("192.0.2.1")
	for i := range 3 {
		if err := g.Admit(a, now); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	if err := g.Admit(a, now); reason(err) != Rate {
		t.Errorf("past the burst: %v", err)
	}
	if err := g.Admit(a, now.Add(500*time.Millisecond)); err != nil {
		t.Errorf("after one join's refill: %v", err)
	}
	for i := range 3 {
		_ = g.Admit(netip.MustParseAddr("2001:db8::"+string(rune('1'+i))), now)
	}
	if err := g.Admit(netip.MustParseAddr("2001:db8::ffff"), now); reason(err) != Rate {
		t.Errorf("a fourth address of one /64: %v", err)
	}
	if err := g.Admit(netip.MustParseAddr("::ffff:192.0.2.2"), now); err != nil {
		t.Errorf("another address: %v", err)
	}
	if err := g.Admit(netip.MustParseAddr("192.0.2.3"), now); err != nil {
		t.Errorf("a fourth source: %v", err)
	}
	// A fifth source with four remembered, none refilled: it is let in,
	// and one of the others forgotten (never a newcomer refused for
	// want of room).
	if err := g.Admit(netip.MustParseAddr("192.0.2.4"), now); err != nil {
		t.Errorf("a fifth source with 4 remembered and none refilled: %v", err)
	}
	if len(g.buckets) != 4 {
		t.Errorf("%d sources remembered, at most 4", len(g.buckets))
	}
	if n := g.Refusals()[Rate]; n != 2 {
		t.Errorf("%d rate refusals counted, want 2", n)
	}
}

// A token joins once; the rejoin token it gives joins once more, with the
// same grant and expiry, and holds the same one record however often it
// is used in turn; a join released (its room was full) may come again;
// the ids remembered are bounded and forgotten once expired.
func TestJoinOnce(t *testing.T) {
	g, err := New(Config{Secret: key, MaxTracked: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, _ := Mint(key, Grant{Room: "r", Identity: "a"}, now, time.Minute)
	adm, err := g.Join(tok, "", now)
	if err != nil || adm.Grant.Identity != "a" || adm.Grant.Publish {
		t.Fatalf("join: %+v %v", adm, err)
	}
	if _, err := g.Join(tok, "r", now); reason(err) != Replayed {
		t.Errorf("again: %v", err)
	}
	rejoin := adm.Rejoin
	for i := range 5 { // reloads: each rejoin token once, one record
		next, err := g.Join(rejoin, "r", now)
		if err != nil || next.Grant != adm.Grant {
			t.Fatalf("rejoin %d: %+v %v", i, next, err)
		}
		if _, err := g.Join(rejoin, "r", now); reason(err) != Replayed {
			t.Errorf("rejoin %d again: %v", i, err)
		}
		rejoin = next.Rejoin
	}
	if _, err := g.Join(tok, "", now); reason(err) != Replayed {
		t.Errorf("the first token after its rejoins: %v", err)
	}
	if len(g.used) != 1 {
		t.Errorf("%d records for one invitation", len(g.used))
	}
	c, _ := parse(key, rejoin, now)
	if c.Expires != now.Add(time.Minute).Unix() || c.ID != adm.id || c.Generation != 6 {
		t.Errorf("the rejoin token: %+v", c)
	}
	// Released: the room refused it after the gate let it through.
	other, _ := Mint(key, Grant{Room: "r", Identity: "b"}, now, time.Minute)
	adm2, err := g.Join(other, "", now)
	if err != nil {
		t.Fatal(err)
	}
	g.Release(adm2)
	if _, err := g.Join(other, "", now); err != nil {
		t.Errorf("a released token: %v", err)
	}
	third, _ := Mint(key, Grant{Room: "r", Identity: "c"}, now, time.Minute)
	if _, err := g.Join(third, "", now); reason(err) != Busy {
		t.Errorf("a third live token with 2 remembered: %v", err)
	}
	if _, err := g.Join(third, "", now.Add(2*time.Minute)); reason(err) != Expired {
		t.Errorf("expired: %v", err)
	}
	late, _ := Mint(key, Grant{Room: "r", Identity: "c"}, now.Add(2*time.Minute), time.Minute)
	if _, err := g.Join(late, "", now.Add(2*time.Minute)); err != nil {
		t.Errorf("once the others expired: %v", err)
	}
	if _, err := g.Join("", "r", now); reason(err) != NoToken {
		t.Errorf("without a token: %v", err)
	}
	if _, err := Mint(key, Grant{Room: "r", Identity: "d"}, now, MaxTTL+time.Second); err == nil {
		t.Error("minted a token for longer than MaxTTL")
	}
}

// Open rooms with a secret set: a join without a token gets in, by room
// name; a token given is still checked.
func TestOpenRoomsWithASecret(t *testing.T) {
	g, err := New(Config{Secret: key, Open: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if adm, err := g.Join("", "lobby", now); err != nil || adm.Grant.Room != "lobby" || !adm.Grant.Publish || adm.Rejoin != "" {
		t.Errorf("open join: %+v %v", adm, err)
	}
	forged, _ := Mint([]byte("another secret of thirty-two bytes"), Grant{Room: "r", Identity: "a"}, now, time.Minute)
	if _, err := g.Join(forged, "", now); reason(err) != Signature {
		t.Errorf("a forged token in open rooms: %v", err)
	}
}

// A gate without a secret exists only when rooms are open; a short
// secret is refused; both errors name the flag.
func TestNewNamesTheField(t *testing.T) {
	for _, c := range []Config{{}, {Secret: key[:8]}, {Open: true, JoinRate: -1}} {
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "token-secret") && !strings.Contains(err.Error(), "join-rate") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
