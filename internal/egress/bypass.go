package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/rtnl"
)

// Bypassed says what a frame handed to ifindex's driver directly would
// pass by that the kernel's own sending would not ("" if nothing), or
// what could not be read (the caller should take it as something): a
// root qdisc that may delay or drop (anything but noqueue, a FIFO,
// fq_codel or mq of those), a clsact qdisc or tcx programs (TC egress
// programs), an nftables chain on the IPv4, IPv6 or inet output or
// postrouting hooks or any netdev egress hook, IPsec (xfrm) policies, BPF
// programs on this process's cgroup's egress or UDP sendmsg hooks, or a
// legacy iptables table. Not seen: a per-socket xfrm policy
// (IP_XFRM_POLICY), which the kernel does not report.
func Bypassed(ifindex int) (string, error) {
	for _, check := range []func(int) (string, error){qdiscs, tcxPrograms, nftChains, xfrmPolicies, cgroupPrograms, legacyTables} {
		if why, err := check(ifindex); why != "" || err != nil {
			return why, err
		}
	}
	return "", nil
}

// Qdiscs a sender may pass by: they neither shape nor drop but when full.
var passable = map[string]bool{"noqueue": true, "pfifo_fast": true, "pfifo": true, "bfifo": true, "fq_codel": true, "mq": true, "ingress": true}

func qdiscs(ifindex int) (string, error) {
	var tc [20]byte // struct tcmsg: family, pads, ifindex, handle, parent, info
	binary.NativeEndian.PutUint32(tc[4:], uint32(ifindex))
	msgs, err := rtnl.Request(unix.NETLINK_ROUTE, unix.RTM_GETQDISC, unix.NLM_F_DUMP, tc[:])
	if err != nil {
		return "", fmt.Errorf("egress: qdiscs: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWQDISC || len(m.Data) < len(tc) || int(binary.NativeEndian.Uint32(m.Data[4:])) != ifindex {
			continue
		}
		attrs, err := rtnl.Attrs(m.Data[len(tc):])
		if err != nil {
			return "", err
		}
		for _, a := range attrs {
			if a.Type != unix.TCA_KIND {
				continue
			}
			if kind := rtnl.CString(a.Value); !passable[kind] {
				return "qdisc " + kind, nil
			}
		}
	}
	return "", nil
}

// nftables (linux/netfilter/nf_tables.h, nfnetlink.h).
const (
	nfnlSubsysNFTables = 10
	nftMsgNewChain     = 3
	nftMsgGetChain     = 4
	nftaChainTable     = 1
	nftaChainName      = 3
	nftaChainHook      = 4
	nftaHookHooknum    = 1
	nfprotoInet        = 1
	nfprotoIPv4        = 2
	nfprotoNetdev      = 5
	nfprotoIPv6        = 10
	nfInetLocalOut     = 3
	nfInetPostRouting  = 4
	nfNetdevEgress     = 1
)

func nftChains(ifindex int) (string, error) {
	// One dump per family, which the request's nfgenmsg names (the
	// answers read here carried none).
	for _, family := range []uint8{nfprotoInet, nfprotoIPv4, nfprotoIPv6, nfprotoNetdev} {
		msgs, err := rtnl.Request(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgGetChain, unix.NLM_F_DUMP, []byte{family, 0, 0, 0})
		if errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EAFNOSUPPORT) {
			continue // no nf_tables, or not for this family: no chains
		}
		if err != nil {
			return "", fmt.Errorf("egress: nftables chains: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysNFTables<<8|nftMsgNewChain || len(m.Data) < 4 {
				continue
			}
			attrs, err := rtnl.Attrs(m.Data[4:])
			if err != nil {
				return "", err
			}
			var table, name string
			hook := -1
			for _, a := range attrs {
				switch a.Type {
				case nftaChainTable:
					table = rtnl.CString(a.Value)
				case nftaChainName:
					name = rtnl.CString(a.Value)
				case nftaChainHook:
					hook = chainHook(a.Value)
				}
			}
			switch {
			case family != nfprotoNetdev && (hook == nfInetLocalOut || hook == nfInetPostRouting),
				family == nfprotoNetdev && hook == nfNetdevEgress: // (a chain on several devices names none: any counts)
				return fmt.Sprintf("nftables chain %s %s hooked on %s", table, name, hookName(family, hook)), nil
			}
		}
	}
	return "", nil
}

func chainHook(b []byte) int {
	attrs, err := rtnl.Attrs(b)
	if err != nil {
		return -1
	}
	for _, a := range attrs {
		if a.Type == nftaHookHooknum && len(a.Value) == 4 {
			return int(binary.BigEndian.Uint32(a.Value))
		}
	}
	return -1
}

func hookName(family uint8, hook int) string {
	switch {
	case family == nfprotoNetdev:
		return "egress"
	case hook == nfInetLocalOut:
		return "output"
	}
	return "postrouting"
}

// legacyTables names an x_tables table loaded in this namespace (its
// hooks run on output whatever its rules), "" if none.
func legacyTables(int) (string, error) {
	for _, f := range []string{"/proc/thread-self/net/ip_tables_names", "/proc/thread-self/net/ip6_tables_names"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // x_tables not loaded
		}
		if err != nil {
			return "", fmt.Errorf("egress: iptables tables: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return "iptables (legacy) tables " + strings.ReplaceAll(t, "\n", ", "), nil
		}
	}
	return "", nil
}

// tcxPrograms names TC egress programs attached with tcx (which needs no
// clsact qdisc).
func tcxPrograms(ifindex int) (string, error) {
	r, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXEgress})
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
		return "", nil // a kernel without tcx (before 6.6): nothing attached with it
	}
	if err != nil {
		return "", fmt.Errorf("egress: tcx programs: %w", err)
	}
	if len(r.Programs) > 0 {
		return fmt.Sprintf("%d tcx egress programs", len(r.Programs)), nil
	}
	return "", nil
}

// xfrm (linux/xfrm.h).
const xfrmMsgGetPolicy = 0x15

// xfrmPolicies names IPsec policies: the kernel's sending looks them up
// (and may encrypt, or drop) after the route.
func xfrmPolicies(int) (string, error) {
	msgs, err := rtnl.Request(unix.NETLINK_XFRM, xfrmMsgGetPolicy, unix.NLM_F_DUMP, nil)
	if errors.Is(err, syscall.EPROTONOSUPPORT) {
		return "", nil // no xfrm_user: no policies made through it
	}
	if err != nil {
		return "", fmt.Errorf("egress: xfrm policies: %w", err)
	}
	if len(msgs) > 0 {
		return fmt.Sprintf("%d xfrm (IPsec) policies", len(msgs)), nil
	}
	return "", nil
}

// cgroupPrograms names BPF programs in effect on this process's cgroup
// (v2) at the egress or UDP sendmsg hooks (systemd's IPAddressDeny=,
// Cilium's socket load balancing).
func cgroupPrograms(int) (string, error) {
	dir, err := cgroup2Dir()
	if err != nil || dir == "" {
		return "", err
	}
	f, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("egress: cgroup: %w", err)
	}
	defer f.Close()
	for _, at := range []ebpf.AttachType{ebpf.AttachCGroupInetEgress, ebpf.AttachCGroupUDP4Sendmsg, ebpf.AttachCGroupUDP6Sendmsg} {
		r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: at, QueryFlags: unix.BPF_F_QUERY_EFFECTIVE})
		if errors.Is(err, ebpf.ErrNotSupported) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("egress: cgroup programs: %w", err)
		}
		if len(r.Programs) > 0 {
			return fmt.Sprintf("%d BPF programs on cgroup %s's %v hook", len(r.Programs), dir, at), nil
		}
	}
	return "", nil
}

// cgroup2Dir is this process's cgroup in the mounted cgroup2 hierarchy
// ("" if none is mounted).
func cgroup2Dir() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("egress: cgroup: %w", err)
	}
	path, ok := "", false
	for _, l := range strings.Split(string(b), "\n") {
		if p, found := strings.CutPrefix(l, "0::"); found {
			path, ok = p, true
		}
	}
	if !ok {
		return "", nil
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("egress: mounts: %w", err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		// ID parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, found := strings.Cut(l, " - ")
		if !found || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			return f[4] + path, nil
		}
	}
	return "", nil
}
