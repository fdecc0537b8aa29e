// Package forwarding manages the per-interface forwarding sysctls that
// bpf_fib_lookup needs: the offload's and the SFU's route lookups ask from
// the loopback interface, which must forward.
package forwarding

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// bpf_fib_lookup (how the program finds the egress interface and MAC
// addresses) refuses to answer for an ingress interface that does not forward
// (BPF_FIB_LKUP_RET_FWD_DISABLED), even for datagrams the relay originates.
// So offload interfaces need net.ipv{4,6}.conf.IFACE.forwarding=1.

func forwardingPaths(iface string) []string {
	return []string{
		"/proc/sys/net/ipv4/conf/" + iface + "/forwarding",
		"/proc/sys/net/ipv6/conf/" + iface + "/forwarding",
	}
}

// Enabled reports whether both families forward on iface in the
// calling thread's network namespace.
func Enabled(iface string) bool {
	for _, p := range forwardingPaths(iface) {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			return false
		}
	}
	return true
}

// Enable turns forwarding on for iface (IPv4 and IPv6) and returns
// a function that restores the previous values.
func Enable(iface string) (restore func() error, err error) {
	var undo []func() error
	restore = func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	for _, p := range forwardingPaths(iface) {
		old, err := os.ReadFile(p)
		if err != nil {
			_ = restore()
			return nil, fmt.Errorf("forwarding: read %s: %w", p, err)
		}
		if strings.TrimSpace(string(old)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			_ = restore()
			return nil, fmt.Errorf("forwarding: enable (%s): %w", p, err)
		}
		undo = append(undo, func() error { return os.WriteFile(p, old, 0o644) })
	}
	return restore, nil
}
