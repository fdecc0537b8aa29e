package netns

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A namespace whose creating process is gone is swept; one whose process
// runs (this test's) is left alone.
func TestSweepOrphans(t *testing.T) {
	testenv.RequireRoot(t)
	const prefix = "ebrtc-sweeptest"
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := fmt.Sprintf("%s-%d-0a0b0c", prefix, dead.Process.Pid)
	if err := IP("netns", "add", orphan); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = (&NS{Name: orphan}).Delete() })
	live, err := New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Delete() })
	if _, err := os.Stat("/run/netns/" + orphan); err == nil {
		t.Errorf("New left %s, whose process is gone", orphan)
	}
	if gone := SweepOrphans(prefix); slices.Contains(gone, live.Name) {
		t.Errorf("swept %s, whose process runs", live.Name)
	}
	if _, err := os.Stat("/run/netns/" + live.Name); err != nil {
		t.Errorf("%s: %v", live.Name, err)
	}
}
