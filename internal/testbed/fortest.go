package testbed

import (
	"testing"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// ForTest builds a testbed for a test (root and ip needed: skipped, or
// failed under CI=true, without them), removed when the test ends.
func ForTest(t testing.TB, opts Options) *Testbed {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	tb, err := NewWith(opts)
	if err != nil {
		testenv.Missing(t, "namespace testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("testbed cleanup: %v", err)
		}
	})
	return tb
}
