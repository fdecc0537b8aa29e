package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v4"
)

var sess = Session{LocalUfrag: "sfu1", LocalPwd: "0123456789abcdefghijkl", RemoteUfrag: "brws"}

// check builds a connectivity check as a browser sends it (RFC 8445 7.1.1).
func check(t *testing.T, user, pwd string, useCandidate bool) []byte {
	t.Helper()
	setters := []stun.Setter{stun.TransactionID, stun.BindingRequest, stun.NewUsername(user),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0x1e, 0xff}}}
	if useCandidate {
		setters = append(setters, stun.RawAttribute{Type: stun.AttrUseCandidate})
	}
	setters = append(setters, stun.NewShortTermIntegrity(pwd), stun.Fingerprint)
	m, err := stun.Build(setters...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

func decode(t *testing.T, b []byte) *stun.Message {
	t.Helper()
	m := &stun.Message{Raw: b}
	if err := m.Decode(); err != nil {
		t.Fatalf("response does not decode: %v", err)
	}
	return m
}

// A valid check gets a success with our integrity and the address it came
// from; the first from an address and a nomination are reported once each.
func TestAnswersValidChecks(t *testing.T) {
	var got []Binding
	ice := NewICE(ICEConfig{})
	s := sess
	s.OnBinding = func(b Binding) { got = append(got, b) }
	if err := ice.Add(s); err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("10.0.0.7:50000")
	for _, nominate := range []bool{false, false, true, true} {
		resp, err := ice.Handle(check(t, "sfu1:brws", sess.LocalPwd, nominate), from)
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, resp)
		var xor stun.XORMappedAddress
		if m.Type != stun.BindingSuccess || stun.NewShortTermIntegrity(sess.LocalPwd).Check(m) != nil ||
			stun.Fingerprint.Check(m) != nil || xor.GetFrom(m) != nil || xor.String() != from.String() {
			t.Fatalf("response %v, mapped %v", m, xor)
		}
	}
	want := []Binding{{"sfu1", from, false}, {"sfu1", from, true}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("bindings reported %v, want %v", got, want)
	}
}

// Bad checks get the error RFC 8445 7.3 names, and change nothing.
func TestRefusesBadChecks(t *testing.T) {
	ice := NewICE(ICEConfig{})
	s := sess
	s.OnBinding = func(b Binding) { t.Errorf("binding %v from a bad check", b) }
	if err := ice.Add(s); err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("[fd00::7]:50000")
	noIntegrity, _ := stun.Build(stun.TransactionID, stun.BindingRequest, stun.NewUsername("sfu1:brws"), stun.Fingerprint)
	for name, c := range map[string]struct {
		msg  []byte
		code stun.ErrorCode
	}{
		"wrong password":     {check(t, "sfu1:brws", "not-the-password-at-all", false), stun.CodeUnauthorized},
		"unknown ufrag":      {check(t, "nope:brws", sess.LocalPwd, false), stun.CodeUnauthorized},
		"wrong remote ufrag": {check(t, "sfu1:evil", sess.LocalPwd, false), stun.CodeUnauthorized},
		"no colon":           {check(t, "sfu1", sess.LocalPwd, false), stun.CodeUnauthorized},
		"no integrity":       {noIntegrity.Raw, stun.CodeBadRequest},
	} {
		resp, err := ice.Handle(c.msg, from)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := decode(t, resp)
		var ec stun.ErrorCodeAttribute
		if m.Type.Class != stun.ClassErrorResponse || ec.GetFrom(m) != nil || ec.Code != c.code {
			t.Errorf("%s: response %v (%v), want error %d", name, m, ec, c.code)
		}
	}
	// Not a request, and not STUN at all: no answer.
	ind, _ := stun.Build(stun.TransactionID, stun.NewType(stun.MethodBinding, stun.ClassIndication))
	if resp, err := ice.Handle(ind.Raw, from); resp != nil || err != ErrNotBindingRequest {
		t.Errorf("indication: %v, %v", resp, err)
	}
	if resp, err := ice.Handle([]byte{0, 1, 0}, from); resp != nil || err == nil {
		t.Errorf("garbage: %v, %v", resp, err)
	}
	ice.Remove("sfu1")
	if resp, _ := ice.Handle(check(t, "sfu1:brws", sess.LocalPwd, true), from); decode(t, resp).Type.Class != stun.ClassErrorResponse {
		t.Error("a removed session's check succeeded")
	}
}

// Consent lapses 30 s after the last valid check, not before.
func TestConsentExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	ice := NewICE(ICEConfig{Now: func() time.Time { return now }})
	if err := ice.Add(sess); err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddrPort("10.0.0.7:1"), netip.MustParseAddrPort("10.0.0.8:2")
	for _, from := range []netip.AddrPort{a, b} {
		if _, err := ice.Handle(check(t, "sfu1:brws", sess.LocalPwd, false), from); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(20 * time.Second)
	if _, err := ice.Handle(check(t, "sfu1:brws", sess.LocalPwd, false), b); err != nil {
		t.Fatal(err)
	}
	now = now.Add(ConsentTimeout - 20*time.Second - time.Millisecond)
	if gone := ice.Expire(); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	now = now.Add(time.Millisecond)
	if gone := ice.Expire(); len(gone) != 1 || gone[0].Remote != a {
		t.Fatalf("expired %v, want only %v", gone, a)
	}
	if gone := ice.Expire(); len(gone) != 0 {
		t.Fatalf("expired twice: %v", gone)
	}
}

func TestSessionValidation(t *testing.T) {
	ice := NewICE(ICEConfig{})
	for _, s := range []Session{
		{LocalUfrag: "abc", LocalPwd: sess.LocalPwd, RemoteUfrag: "x"},
		{LocalUfrag: "abcd", LocalPwd: "short", RemoteUfrag: "x"},
		{LocalUfrag: "ab:d", LocalPwd: sess.LocalPwd, RemoteUfrag: "x"},
		{LocalUfrag: "abcd", LocalPwd: sess.LocalPwd},
	} {
		if ice.Add(s) == nil {
			t.Errorf("accepted %+v", s)
		}
	}
	if ice.Add(sess) != nil || ice.Add(sess) == nil {
		t.Error("a session added twice")
	}
}

// Whatever arrives, Handle answers or errs; it never panics, and only a
// valid check succeeds.
func FuzzHandle(f *testing.F) {
	t := &testing.T{}
	f.Add(check(t, "sfu1:brws", sess.LocalPwd, true))
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		ice := NewICE(ICEConfig{})
		if err := ice.Add(sess); err != nil {
			t.Fatal(err)
		}
		resp, err := ice.Handle(b, netip.MustParseAddrPort("10.0.0.1:9"))
		if err != nil {
			return
		}
		m := &stun.Message{Raw: resp}
		if m.Decode() != nil {
			t.Fatalf("response does not decode")
		}
		if m.Type == stun.BindingSuccess {
			req := &stun.Message{Raw: b}
			if req.Decode() != nil || stun.NewShortTermIntegrity(sess.LocalPwd).Check(req) != nil {
				t.Fatalf("success for a request without our integrity")
			}
		}
	})
}
