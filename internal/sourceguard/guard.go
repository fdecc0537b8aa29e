// Package sourceguard drops datagrams spoofed from this host's own
// addresses before any socket of the TURN server reads them: a BPF socket
// filter (bpf/source_guard.c) attached to each UDP socket, with a map of the
// host's addresses that Guard keeps in step with its interfaces.
//
// Such a datagram can only come from this host, through loopback. Linux
// drops IPv4 ones from elsewhere as martians but delivers IPv6 ones, so
// without the filter a frame spoofed from our relay address reaches a
// hairpinned client as its peer's media, on the kernel path as on the fast
// path (which hands these frames to the kernel, bpf/source.h).
package sourceguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type host_addr guard ../../bpf/source_guard.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror

// SyncInterval is how often the address map follows the interfaces.
const SyncInterval = time.Second

// Guard is the loaded filter and the goroutine that keeps its map current.
type Guard struct {
	objs guardObjects
	stop chan struct{}
	done sync.WaitGroup

	mu    sync.Mutex
	known map[guardHostAddr]bool
}

// Load loads the filter and fills its map; it needs CAP_BPF (or root).
func Load() (*Guard, error) {
	g := &Guard{stop: make(chan struct{}), known: map[guardHostAddr]bool{}}
	if err := loadGuardObjects(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("source guard: load BPF socket filter: %w", err)
	}
	if err := g.Sync(); err != nil {
		g.objs.Close()
		return nil, err
	}
	g.done.Add(1)
	go g.follow()
	return g, nil
}

// Control attaches the filter to a socket before it is bound; it fits
// net.ListenConfig.Control and net.Dialer.Control.
func (g *Guard) Control(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_BPF, g.objs.SourceGuard.FD())
	})
	if err = errors.Join(err, serr); err != nil {
		return fmt.Errorf("source guard: attach: %w", err)
	}
	return nil
}

// Dropped is how many datagrams the filter has dropped.
func (g *Guard) Dropped() (uint64, error) {
	var perCPU []uint64
	if err := g.objs.Spoofed.Lookup(uint32(0), &perCPU); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Close stops following the interfaces and releases the filter (sockets
// keep their attached copy until they close).
func (g *Guard) Close() error {
	close(g.stop)
	g.done.Wait()
	return g.objs.Close()
}

func (g *Guard) follow() {
	defer g.done.Done()
	t := time.NewTicker(SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			_ = g.Sync() // keep the last known set on a transient error
		}
	}
}

// Sync makes the map hold exactly the interfaces' current addresses.
func (g *Guard) Sync() error {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("source guard: interface addresses: %w", err)
	}
	want := map[guardHostAddr]bool{}
	for _, ia := range ifas {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			want[key(pfx.Addr())] = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for k := range want {
		if !g.known[k] {
			errs = append(errs, g.objs.HostAddrs.Put(k, uint8(1)))
		}
	}
	for k := range g.known {
		if !want[k] {
			errs = append(errs, g.objs.HostAddrs.Delete(k))
		}
	}
	g.known = want
	return errors.Join(errs...)
}

func key(a netip.Addr) guardHostAddr {
	var k guardHostAddr
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		copy(k.Addr.Bytes[:4], b[:])
		k.Family = unix.AF_INET
	} else {
		k.Addr.Bytes = a.As16()
		k.Family = unix.AF_INET6
	}
	return k
}
