// Package testenv decides what a test does when its environment lacks a
// prerequisite: skip on a developer's machine, fail under CI=true.
package testenv

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test, or fails it under CI, explaining what is missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing (CI=true, not skipping): "+format, args...)
	}
	t.Skipf("prerequisite missing: "+format, args...)
}

// RequireRoot needs root, for loading BPF and creating namespaces.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "must run as root (BPF, network namespaces)")
	}
}

// RequireCommand needs an executable on PATH and returns its path.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "command %q not found", name)
	}
	return p
}

// LoopbackUDP is a UDP socket on 127.0.0.1 (an ephemeral port), closed
// when the test ends.
func LoopbackUDP(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// StartGroup starts cmd in a process group of its own and, when the test
// ends, kills the whole group and waits until every member is gone. A
// browser leaves helper processes (renderer, crash handler) writing into its
// profile after the main process dies; they must be gone before the test's
// temporary directories are removed. It returns cmd's Wait, which callers
// must use instead of cmd.Wait: any number may call it, at once too (two
// calls of cmd.Wait, one of them the cleanup's, left the second blocked
// for good on a CommandContext's result).
func StartGroup(t testing.TB, cmd *exec.Cmd) (wait func() error) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// A helper that left the group (a browser's crash handler) may hold
	// the output pipes open: Wait gives up on them after this.
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	var once sync.Once
	var err error
	wait = func() error {
		once.Do(func() { err = cmd.Wait() })
		return err
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = wait()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
				return
			}
		}
		t.Errorf("process group %d (%s) still alive 10 s after SIGKILL", pgid, cmd.Path)
	})
	return wait
}

// BPFFS mounts a bpffs of the test's own and returns its path, unmounted
// (with every pin in it) when the test ends. `ip netns exec` gives the
// processes it runs a private /sys, whose /sys/fs/bpf would vanish with
// them: pins meant to outlive a process go here, which they share.
func BPFFS(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bpffs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		Missing(t, "mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Must fails the test at once on an error of a step it cannot go on
// without.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
