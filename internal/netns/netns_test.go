package netns

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// Delete kills what runs in the namespace, also a process in a session of
// its own that its parent left behind (a browser puppeteer launched, its
// script killed).
func TestDeleteKillsWhatRunsInside(t *testing.T) {
	testenv.RequireRoot(t)
	ns, err := New("ebrtc-killtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	cmd := ns.Command("setsid", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var pids string
	for range 50 { // (ip netns exec, then setsid, become sleep)
		out, _ := exec.Command("ip", "netns", "pids", ns.Name).Output()
		if pids = strings.TrimSpace(string(out)); pids != "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pids == "" {
		t.Fatal("nothing runs in the namespace")
	}
	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still runs after Delete", pids)
	}
	for _, f := range strings.Fields(pids) {
		if pid, _ := strconv.Atoi(f); unix.Kill(pid, 0) == nil {
			t.Errorf("process %d still runs", pid)
		}
	}
}
