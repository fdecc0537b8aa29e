package testbed

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// A second server for fleet tests, as a second machine: a namespace of its
// own, with its own links to the client and the peer namespaces (so that
// its fast path attaches to interfaces of its own):
//
//	client ns                 server2 ns                   peer ns
//	  cli2  <--veth-->  eth-cli       eth-peer  <--veth-->  peer2
//	10.201.201.2      10.201.201.1   10.201.202.1        10.201.202.2
//	fd00:201:201::2   fd00:201:201::1 fd00:201:202::1    fd00:201:202::2
//
// It routes the client's and the peer's own subnets (10.201.1.0/24,
// 10.201.2.0/24 and their IPv6 twins) over these links, so the testbed's
// client and peer addresses reach it unchanged.
var (
	Server2ClientIP4 = netip.MustParseAddr("10.201.201.1")
	Server2PeerIP4   = netip.MustParseAddr("10.201.202.1")
	Server2ClientIP6 = netip.MustParseAddr("fd00:201:201::1")
	Server2PeerIP6   = netip.MustParseAddr("fd00:201:202::1")
)

// AddServer adds the second server namespace (Close deletes it).
func (tb *Testbed) AddServer() (*netns.NS, error) {
	ns, err := netns.New("ebrtc-tb")
	if err != nil {
		return nil, err
	}
	tb.extra = append(tb.extra, ns)
	if err := tb.link(ns, tb.Client, ServerCliIface, "cli2", 201, 1); err != nil {
		return nil, err
	}
	return ns, tb.link(ns, tb.Peer, ServerPeerIface, "peer2", 202, 2)
}

// link joins server to far over subnet 10.201.subnet.0/24 (server .1, far
// .2, as connect does) and routes far's testbed subnet 10.201.home.0/24
// (and its IPv6 twin) through it from server. The far end is prepared as
// tb.opts say.
func (tb *Testbed) link(server, far *netns.NS, inner, outer string, subnet, home int) error {
	v4, v6 := fmt.Sprintf("10.201.%d.", subnet), fmt.Sprintf("fd00:201:%d::", subnet)
	run := func(ns *netns.NS, steps ...[]string) error {
		for _, step := range steps {
			if err := ns.IP(step...); err != nil {
				return err
			}
		}
		return nil
	}
	err := run(server,
		[]string{"link", "add", inner, "type", "veth", "peer", "name", outer, "netns", far.Name},
		[]string{"addr", "add", v4 + "1/24", "dev", inner, "nodad"},
		[]string{"addr", "add", v6 + "1/64", "dev", inner, "nodad"},
		[]string{"link", "set", inner, "up"})
	if err == nil {
		err = run(far,
			[]string{"addr", "add", v4 + "2/24", "dev", outer, "nodad"},
			[]string{"addr", "add", v6 + "2/64", "dev", outer, "nodad"},
			[]string{"link", "set", outer, "up"})
	}
	if err == nil {
		err = run(server,
			[]string{"route", "add", fmt.Sprintf("10.201.%d.0/24", home), "via", v4 + "2"},
			[]string{"route", "add", fmt.Sprintf("fd00:201:%d::/64", home), "via", v6 + "2"})
	}
	if err != nil {
		return err
	}
	if tb.opts.ServerTxChecksumOff {
		if err := server.Do(func() error { return netns.DisableTxChecksum(inner) }); err != nil {
			return err
		}
	}
	return tb.prepareFarEnd(far, outer)
}

// prepareFarEnd does what connect does to a far end: full checksums, and
// XDP running so that frames sent into the veth from XDP are received.
func (tb *Testbed) prepareFarEnd(far *netns.NS, iface string) error {
	fullChecksums := !tb.opts.Unprepared || tb.opts.FullChecksums
	farXDP := !tb.opts.Unprepared || tb.opts.FarXDP
	return far.Do(func() error {
		if fullChecksums {
			if err := netns.DisableTxChecksum(iface); err != nil {
				return err
			}
		}
		if !farXDP {
			return nil
		}
		c, err := offload.AttachPass(iface)
		if err == nil {
			tb.passes = append(tb.passes, c)
		}
		return err
	})
}

// Server2TURNArgs are TURNArgs for the second server: its listeners and
// relay addresses, the metrics endpoint in its own namespace.
func Server2TURNArgs(users ...string) []string {
	r := strings.NewReplacer(ServerClientIP4.String(), Server2ClientIP4.String(), ServerClientIP6.String(), Server2ClientIP6.String(),
		ServerPeerIP4.String(), Server2PeerIP4.String(), ServerPeerIP6.String(), Server2PeerIP6.String())
	args := TURNArgs(users...)
	for i, a := range args {
		args[i] = r.Replace(a)
	}
	return args
}

// StartRelayIn is StartRelay in another namespace (the second server's).
// The relay's metrics endpoint is MetricsAddr inside ns.
func StartRelayIn(ns *netns.NS, bin string, args ...string) (*Relay, error) {
	out := &LineBuffer{}
	p, err := Start(ns, out, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := out.Wait("ready", 15*time.Second, p); err != nil {
		_ = p.Stop(time.Second)
		return nil, fmt.Errorf("relay: %w", err)
	}
	return &Relay{Process: p, ns: ns, out: out}, nil
}
