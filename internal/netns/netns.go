// Package netns creates named network namespaces (as `ip netns add` does),
// runs commands and Go code inside them, and deletes them again.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NS is a named network namespace under /run/netns.
type NS struct {
	Name string
}

// New creates a namespace named prefix-<pid>-<random>, with loopback up.
// Namespaces of the prefix whose creating process is gone (a test binary
// killed, or timed out, before its cleanup ran) are deleted first: the pid
// in the name says whose each is.
func New(prefix string) (*NS, error) {
	SweepOrphans(prefix)
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	ns := &NS{Name: fmt.Sprintf("%s-%d-%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))}
	if err := IP("netns", "add", ns.Name); err != nil {
		return nil, err
	}
	if err := ns.IP("link", "set", "lo", "up"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// SweepOrphans deletes the namespaces New made with prefix whose process
// no longer runs, and says which.
func SweepOrphans(prefix string) []string {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	var gone []string
	for _, e := range entries {
		pid, ok := ownerPID(e.Name(), prefix)
		if !ok || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		if (&NS{Name: e.Name()}).Delete() == nil {
			gone = append(gone, e.Name())
		}
	}
	return gone
}

// ownerPID is the pid in a name New gave (prefix-<pid>-<random>).
func ownerPID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	pid, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(pid)
	return n, err == nil && n > 0
}

// Delete kills the processes in the namespace, then removes it; the
// kernel removes its interfaces with it. (A browser a script launched in
// its own session, as puppeteer launches Firefox, outlives the script
// killed at a test's failure: it went on taking a CPU from the tests
// after it.)
func (n *NS) Delete() error {
	n.killProcesses()
	return IP("netns", "delete", n.Name)
}

// killProcesses sends SIGKILL to every process in the namespace but this
// one, and waits (up to a second) until they are gone.
func (n *NS) killProcesses() {
	for range 20 {
		out, err := exec.Command("ip", "netns", "pids", n.Name).Output()
		if err != nil {
			return
		}
		left := 0
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() && unix.Kill(pid, unix.SIGKILL) == nil {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// IP runs `ip -n NAME args...`.
func (n *NS) IP(args ...string) error { return IP(append([]string{"-n", n.Name}, args...)...) }

// IP runs the ip(8) command and returns its output in the error on failure.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command returns a command that runs inside the namespace.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Output runs a command inside the namespace and returns its standard output.
func (n *NS) Output(name string, args ...string) (string, error) {
	cmd := n.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s in %s: %v: %s", name, strings.Join(args, " "), n.Name, err, stderr.String())
	}
	return string(out), nil
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn creates
// stay in the namespace after it returns; goroutines fn starts do not run in it.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it dies with the goroutine, so a
		// thread in the wrong namespace never returns to the scheduler.
		runtime.LockOSThread()
		fd, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			errc <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
