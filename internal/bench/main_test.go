package bench

import (
	"os"
	"testing"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// The package's tests share one ebrtc binary (testbed.SharedEbrtc).
func TestMain(m *testing.M) { os.Exit(testbed.RunTests(m)) }
