package sfubench

import (
	"os"
	"testing"

	"github.com/ebrtc/ebrtc/internal/bench/benchtest"
)

// The package's tests share one ebrtc binary, and run while no other bench
// package's do (benchtest.Main).
func TestMain(m *testing.M) { os.Exit(benchtest.Main(m)) }
