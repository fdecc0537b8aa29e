package egress

import (
	"errors"
	"net/netip"
	"testing"
)

// A local destination is no path around the kernel: a Refusal naming
// the route's type, for both families; nor is a link-local one (its
// interface is the socket's choice).
func TestLookupRefusesLocal(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "fe80::1", "fe80::1%lo", "169.254.1.1"} {
		_, err := Lookup(Query{Dst: netip.MustParseAddr(a), DstPort: 9})
		var r *Refusal
		if !errors.As(err, &r) || r.Neighbour {
			t.Errorf("%s: %v; want a refusal of the route", a, err)
		}
	}
}

// Attributes written are read back, padded to 4 bytes.
func TestAttrs(t *testing.T) {
	b := appendAttr(nil, 1, []byte{1, 2, 3})
	b = appendAttr(b, 7, []byte("eth0\x00"))
	if len(b) != 8+12 {
		t.Fatalf("%d bytes: %x", len(b), b)
	}
	attrs, err := parseAttrs(b)
	if err != nil || len(attrs) != 2 || attrs[0].typ != 1 || string(attrs[0].value) != "\x01\x02\x03" || cString(attrs[1].value) != "eth0" {
		t.Fatalf("%+v, %v", attrs, err)
	}
	if _, err := parseAttrs([]byte{200, 0, 1, 0}); err == nil {
		t.Fatal("an attribute longer than its buffer was read")
	}
}
