// Package testenv decides what a test does when its environment lacks a
// prerequisite: skip on a developer's machine, fail under CI=true.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
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
