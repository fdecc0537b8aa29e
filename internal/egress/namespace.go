package egress

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace the questions are asked in, whichever
// namespace the asking goroutine's thread is in (netlink sockets,
// interface indexes, /proc/thread-self/net and /proc/sys/net are the
// thread's): one OS thread of its own, switched into it if it is not
// there (setns: CAP_SYS_ADMIN, needed only then), answers them in turn.
type Namespace struct {
	f      *os.File
	mu     sync.RWMutex
	closed bool
	asks   chan func()
}

// CurrentNamespace is the calling thread's network namespace.
func CurrentNamespace() (*Namespace, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("egress: network namespace: %w", err)
	}
	n := &Namespace{f: f, asks: make(chan func())}
	ready := make(chan error, 1)
	go n.serve(ready)
	if err := <-ready; err != nil {
		f.Close()
		return nil, err
	}
	return n, nil
}

// serve answers on a thread in the namespace. The thread is never
// unlocked: it ends with the goroutine, never back with the scheduler in
// another namespace.
func (n *Namespace) serve(ready chan<- error) {
	runtime.LockOSThread()
	if err := n.enter(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for ask := range n.asks {
		ask()
	}
}

// enter switches the thread into the namespace unless it is there.
func (n *Namespace) enter() error {
	var want, here unix.Stat_t
	if err := unix.Fstat(int(n.f.Fd()), &want); err != nil {
		return fmt.Errorf("egress: network namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &here); err == nil && here.Ino == want.Ino && here.Dev == want.Dev {
		return nil
	}
	if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("egress: setns: %w", err)
	}
	return nil
}

// Close ends the namespace's thread.
func (n *Namespace) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	close(n.asks)
	return n.f.Close()
}

var errClosed = errors.New("egress: namespace closed")

// Lookup is Lookup asked in n.
func (n *Namespace) Lookup(q Query) (p Path, err error) {
	err = n.do(func() error { p, err = Lookup(q); return err })
	return p, err
}

// Bypassed is Bypassed asked in n.
func (n *Namespace) Bypassed(ifindex int) (why string, err error) {
	err = n.do(func() error { why, err = Bypassed(ifindex); return err })
	return why, err
}

func (n *Namespace) do(fn func() error) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return errClosed
	}
	errc := make(chan error, 1)
	n.asks <- func() { errc <- fn() }
	return <-errc
}
