package bench

import (
	"os"
	"testing"

	"github.com/ebrtc/ebrtc/internal/bench/benchtest"
)

// The relay-core tests pin to the CPU the bench packages isolate on: one
// bench package at a time (benchtest.Main).
func TestMain(m *testing.M) { os.Exit(benchtest.Main(m)) }
