// Package benchtest is what the tests of the bench packages share: their
// TestMain, and the check of a report's files.
package benchtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// lockFile serializes the bench packages' test processes on this machine.
var lockFile = filepath.Join(os.TempDir(), "ebrtc-bench-tests.lock")

// Main is a bench package's TestMain: its tests run while no other bench
// package's do (go test runs packages side by side), and the ebrtc binary
// the tests shared (testbed.SharedEbrtc) is removed after them. Isolated
// runs pin to the same last CPU, charge it by the NAPI threads' names,
// which every testbed's veths share, and prioritize the far ends' NAPI
// threads: two at once would measure each other.
func Main(m *testing.M) int {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchtest: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		fmt.Fprintf(os.Stderr, "benchtest: lock %s: %v\n", lockFile, err)
		return 1
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return testbed.RunTests(m)
}

// Report is what a bench package's report writes.
type Report interface {
	WriteJSON(path string) error
	WritePlot(path string) error
}

// CheckFiles writes a report's JSON and chart to dir: the first element of
// the JSON's list has every key, and the chart is a PNG.
func CheckFiles(t *testing.T, rep Report, dir, list string, keys []string) {
	t.Helper()
	jsonPath, pngPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.png")
	if err := rep.WriteJSON(jsonPath); err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	var items []map[string]any
	b, _ := os.ReadFile(jsonPath)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc[list], &items); err != nil || len(items) == 0 {
		t.Fatalf("JSON %q: %v", list, err)
	}
	for _, key := range keys {
		if _, ok := items[0][key]; !ok {
			t.Errorf("JSON %s lacks %q", list, key)
		}
	}
	if err := rep.WritePlot(pngPath); err != nil {
		t.Fatal(err)
	}
	if png, _ := os.ReadFile(pngPath); len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("plot is not a PNG (%d bytes)", len(png))
	}
}
