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
