// Package sourceguard drops datagrams spoofed from this host's own
// addresses before any socket of the TURN server reads them: a BPF socket
// filter (bpf/source_guard.c) attached to each UDP socket, with a map of the
// host's addresses and prefixes that Guard keeps in step with its routing
// tables (package hostaddr).
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
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/hostaddr"
)

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type host_prefix guard ../../bpf/source_guard.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror

// SyncInterval is how often the address map follows the interfaces.
const SyncInterval = time.Second

// Guard is the loaded filter and the goroutine that keeps its map current.
type Guard struct {
	objs guardObjects
	stop chan struct{}
	done sync.WaitGroup

	mu    sync.Mutex
	known map[guardHostPrefix]bool
}

// Load loads the filter and fills its map; it needs CAP_BPF (or root).
func Load() (*Guard, error) {
	g := &Guard{stop: make(chan struct{}), known: map[guardHostPrefix]bool{}}
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

// Sync makes the map hold exactly the host's current addresses and
// prefixes, as its routing tables say (package hostaddr).
func (g *Guard) Sync() error {
	set, err := hostaddr.Read()
	if err != nil {
		return fmt.Errorf("source guard: %w", err)
	}
	want := map[guardHostPrefix]bool{}
	for _, p := range set.Prefixes() {
		want[key(p)] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for k := range want {
		if g.known[k] {
			continue
		}
		if err := g.objs.HostAddrs.Put(k, uint8(1)); err != nil {
			errs = append(errs, err) // not known: tried again at the next Sync
			continue
		}
		g.known[k] = true
	}
	for k := range g.known {
		if want[k] {
			continue
		}
		if err := g.objs.HostAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
			continue
		}
		delete(g.known, k)
	}
	return errors.Join(errs...)
}

// key is a prefix as the filter matches it: IPv4 as IPv4-mapped IPv6.
func key(p netip.Prefix) guardHostPrefix {
	a, bits := p.Addr(), p.Bits()
	if a.Is4() {
		a, bits = netip.AddrFrom16(a.As16()), bits+96
	}
	return guardHostPrefix{Prefixlen: uint32(bits), Addr: a.As16()}
}
