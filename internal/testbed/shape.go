package testbed

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
)

// This kernel has tbf, htb, clsact and cls_bpf but neither sch_netem nor
// act_gact (shared/design/sfu-notes.md, M6): a link is shaped with tbf and
// made lossy with nftables' numgen.

// ShapeLatency is how long a packet may wait in Shape's queue before tbf
// drops it: a bottleneck's buffer, which a sender that does not adapt fills.
const ShapeLatency = "200ms"

// shapeBurst is the token bucket's depth in bytes for a rate: 10 ms at the
// rate, and never less than two full Ethernet frames (a packet larger than
// the bucket would never leave).
func shapeBurst(kbit int) int {
	return max(kbit*1000/8/100, 2*1514)
}

// Shape limits what leaves iface inside ns to kbit kbit/s: a token bucket
// filter as the interface's root qdisc (replacing whatever was there), with
// ShapeLatency of queue; what does not fit is dropped. On the server's end
// of a veth it shapes that far namespace's downlink, including what the
// SFU data plane sends with bpf_redirect (which goes through the egress
// qdisc). undo clears the link as a link clears, delivering what it has
// queued (unshape), and deletes the root qdisc; calling it again does
// nothing.
func Shape(ns *netns.NS, iface string, kbit int) (undo func() error, err error) {
	return ShapeWith(ns, iface, Shaper{Kbit: kbit})
}

// Shaper is a tbf: its rate, its bucket (tc's burst: "8kb"; default 10 ms
// at the rate, at least two full frames) and its queue (tc's latency;
// default ShapeLatency).
type Shaper struct {
	Kbit           int
	Burst, Latency string
}

// ShapeWith is Shape with the bucket and queue given.
func ShapeWith(ns *netns.NS, iface string, s Shaper) (undo func() error, err error) {
	if s.Kbit <= 0 {
		return nil, fmt.Errorf("testbed: shape %s: rate %d kbit/s", iface, s.Kbit)
	}
	if s.Burst == "" {
		s.Burst = fmt.Sprint(shapeBurst(s.Kbit))
	}
	if s.Latency == "" {
		s.Latency = ShapeLatency
	}
	if _, err := ns.Output("tc", "qdisc", "replace", "dev", iface, "root", "tbf",
		"rate", fmt.Sprintf("%dkbit", s.Kbit), "burst", s.Burst, "latency", s.Latency); err != nil {
		return nil, fmt.Errorf("testbed: shape: %w", err)
	}
	return once(func() error { return unshape(ns, iface, s.Latency) }), nil
}

// unshape lifts a Shape: the bucket's rate raised to line rate first, so
// what waits in its queue leaves (deleting a tbf drops its backlog: a
// receiver would see loss no link that clears causes), then, once the queue
// is empty (a second at most), the qdisc deleted.
func unshape(ns *netns.NS, iface, latency string) error {
	if _, err := ns.Output("tc", "qdisc", "change", "dev", iface, "root", "tbf",
		"rate", "10gbit", "burst", "1mb", "latency", latency); err != nil {
		_, _ = ns.Output("tc", "qdisc", "del", "dev", iface, "root")
		return fmt.Errorf("testbed: unshape: %w", err)
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		out, err := ns.Output("tc", "-s", "qdisc", "show", "dev", iface)
		if err != nil || strings.Contains(out, "backlog 0b") {
			break
		}
	}
	if _, err := ns.Output("tc", "qdisc", "del", "dev", iface, "root"); err != nil {
		return fmt.Errorf("testbed: unshape: %w", err)
	}
	return nil
}

// DropTable is the nftables table (family inet) DropRandom installs.
const DropTable = "ebrtc_drop"

// DropRandom drops percent of the UDP datagrams that arrive in ns, at
// random (nftables' numgen, in a prerouting chain of table inet DropTable,
// replaced if it exists), before anything else in ns sees them. It must run
// in the receiver's namespace: the SFU data plane sends replicas with
// bpf_redirect, which bypasses the server namespace's netfilter. undo
// deletes the table; calling it again does nothing.
func DropRandom(ns *netns.NS, percent int) (undo func() error, err error) {
	if percent < 0 || percent > 100 {
		return nil, fmt.Errorf("testbed: drop %d%%", percent)
	}
	// Adding then deleting the table makes the script replace an old one
	// (from an earlier call) in the same transaction.
	rules := fmt.Sprintf(`add table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain in {
		type filter hook prerouting priority raw; policy accept;
		meta l4proto udp numgen random mod 100 < %[2]d counter drop
	}
}
`, DropTable, percent)
	if err := nft(ns, rules); err != nil {
		return nil, fmt.Errorf("testbed: drop: %w", err)
	}
	return once(func() error {
		if err := nft(ns, "delete table inet "+DropTable+"\n"); err != nil {
			return fmt.Errorf("testbed: undo drop: %w", err)
		}
		return nil
	}), nil
}

// nft runs an nftables script inside ns.
func nft(ns *netns.NS, script string) error {
	cmd := ns.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// once makes f run at most once; later calls return nil.
func once(f func() error) func() error {
	var o sync.Once
	return func() error {
		var err error
		o.Do(func() { err = f() })
		return err
	}
}
