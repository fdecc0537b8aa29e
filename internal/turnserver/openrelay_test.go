package turnserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// target is a UDP and a TCP listener where a relay must never deliver.
type target struct {
	name string
	addr netip.AddrPort
	// ownRelay: one of the server's relay addresses (at a port no allocation
	// holds): permissions are per IP, so the refusal comes per datagram.
	ownRelay  bool
	datagrams atomic.Int64
	conns     atomic.Int64
}

// requireLocal shows that the target is an address of the host in ns (a
// datagram sent there from ns arrives), so that its seeing nothing later
// means something; then it starts the count afresh.
func (tg *target) requireLocal(t *testing.T, ns *netns.NS) {
	t.Helper()
	err := ns.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1) })
			return errors.Join(err, serr)
		}}
		c, err := lc.ListenPacket(context.Background(), "udp", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		deadline := time.Now().Add(3 * time.Second)
		for tg.datagrams.Load() == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s (%v) is not an address of the server: a local datagram never arrived", tg.name, tg.addr)
			}
			if _, err := c.WriteTo([]byte("local"), net.UDPAddrFromAddrPort(tg.addr)); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // late copies
	tg.datagrams.Store(0)
}

// listen opens the target's listeners in ns, counting what arrives.
func (tg *target) listen(t *testing.T, ns *netns.NS, bind netip.AddrPort) {
	t.Helper()
	u, err := testbed.ListenUDP(ns, bind)
	if err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", bind.String())
		return err
	}); err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	t.Cleanup(func() { u.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := u.ReadFrom(buf); err != nil {
				return
			}
			tg.datagrams.Add(1)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns.Add(1)
			c.Close()
		}
	}()
}

// specialTargets are addresses in every default-refused range, placed in the
// peer namespace and routed to it from the server: a relay that ignored the
// policy would reach them.
var specialTargets = []string{
	"10.77.0.1", "100.64.0.1", "169.254.169.254", "172.16.0.1", "192.168.0.1", "192.0.0.1", "192.0.2.1",
	"198.18.0.1", "198.51.100.1", "203.0.113.1", "240.0.0.1",
	"fc00::1", "fd77::1", "2001:db8::1", "64:ff9b::a4d:1", "2002::1", "100::1", "2001::1", "fec0::1",
}

// The open-relay matrix: every special range, the host's loopback, its
// listening addresses and the non-relay ports of its relay address, asked
// for through CreatePermission, ChannelBind, Send indications, ChannelData
// and RFC 6062 Connect, over the UDP and the TCP listener. A listener at
// every target sees nothing; a real peer, asked for the same ways, gets
// everything (so the test can fail).
func TestOpenRelayMatrix(t *testing.T) {
	tb := newTestbed(t)
	var targets []*target
	add := func(name string, ns *netns.NS, addr netip.AddrPort, ownRelay bool) {
		tg := &target{name: name, addr: addr, ownRelay: ownRelay}
		tg.listen(t, ns, addr)
		targets = append(targets, tg)
	}
	for _, s := range specialTargets {
		a := netip.MustParseAddr(s)
		bits, via := 32, testbed.PeerIP4
		if a.Is6() {
			bits, via = 128, testbed.PeerIP6
		}
		if err := tb.Peer.IP("addr", "add", fmt.Sprintf("%s/%d", a, bits), "dev", "lo"); err != nil {
			t.Fatal(err)
		}
		if err := tb.Server.IP("route", "add", fmt.Sprintf("%s/%d", a, bits), "via", via.String()); err != nil {
			t.Fatal(err)
		}
		add("special "+s, tb.Peer, netip.AddrPortFrom(a, 9999), false)
	}
	// The host's own services, on every address of the server namespace.
	for _, own := range []struct {
		name     string
		addr     string
		ownRelay bool
	}{
		{"loopback", "127.0.0.1:9999", false}, {"loopback6", "[::1]:9999", false},
		{"listen address", "10.201.1.1:9999", false}, {"listen address6", "[fd00:201:1::1]:9999", false},
		{"relay address", "10.201.2.1:9999", true}, {"relay address6", "[fd00:201:2::1]:9999", true},
		{"relay address, free relay port", "10.201.2.1:65000", true},
		{"relay address, metrics port", "10.201.2.1:9641", true},
	} {
		add(own.name, tb.Server, netip.MustParseAddrPort(own.addr), own.ownRelay)
	}
	// The unspecified address delivers to the host too (to the listeners above).
	unspecified := []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:9999"), netip.MustParseAddrPort("[::]:9999")}
	// Addresses of the host that no interface lists: the IPv6 subnet-router
	// anycast of the relay prefix (Linux adds it on an interface that
	// forwards, as a host routing for other reasons has), and a directed
	// broadcast, reaching any service on the wildcard address.
	if err := tb.Server.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+testbed.ServerPeerIface+"/forwarding", []byte("1\n"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	anycast := &target{name: "relay prefix subnet-router anycast", addr: netip.MustParseAddrPort("[fd00:201:2::]:9998")}
	anycast.listen(t, tb.Server, netip.MustParseAddrPort("[::]:9998"))
	broadcast := &target{name: "relay subnet broadcast", addr: netip.MustParseAddrPort("10.201.2.255:9996")}
	broadcast.listen(t, tb.Server, netip.MustParseAddrPort("0.0.0.0:9996"))
	for _, tg := range []*target{anycast, broadcast} {
		tg.requireLocal(t, tb.Server)
	}
	targets = append(targets, anycast, broadcast)

	// The real peer, allowed by address: the positive control.
	peer := &target{name: "allowed peer", addr: netip.AddrPortFrom(testbed.PeerIP4, 7000)}
	peer.listen(t, tb.Peer, peer.addr)

	args := withoutFlag(testbed.TURNArgs(user+":"+pass), "--allow-peer")
	// The peer is allowed by address, and the relay prefixes by range: a
	// host address in an allowed range must still be refused.
	r, err := tb.StartRelay(testbed.SharedEbrtc(t), append(args, "--allow-peer", testbed.PeerIP4.String(),
		"--allow-peer", "fd00:201:2::/64", "--allow-peer", "10.201.2.0/24",
		"--listen", "tcp://10.201.1.1:3478", "--user-quota", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(5 * time.Second) })

	var table strings.Builder
	for _, transport := range []string{"udp", "tcp"} {
		for _, v6 := range []bool{false, true} {
			c := allocateOver(t, tb, transport, v6, false)
			for i, tg := range append(targets, peer) {
				if tg.addr.Addr().Is6() != v6 {
					continue
				}
				fmt.Fprintf(&table, "%-4s %-34s %s\n", transport, tg.name, tryRelay(t, c, tg.addr, uint16(0x4000+i)))
			}
			for i, u := range unspecified {
				if u.Addr().Is6() == v6 {
					fmt.Fprintf(&table, "%-4s %-34s %s\n", transport, u.Addr(), tryRelay(t, c, u, uint16(0x4100+i)))
				}
			}
			if !v6 { // an IPv6 allocation asked for IPv4-mapped special addresses
				c6 := allocateOver(t, tb, transport, true, false)
				for i, s := range []string{"::ffff:10.77.0.1", "::ffff:127.0.0.1", "::ffff:10.201.2.1"} {
					fmt.Fprintf(&table, "%-4s %-34s %s\n", transport, s, tryRelay(t, c6, netip.AddrPortFrom(netip.MustParseAddr(s), 9999), uint16(0x4200+i)))
				}
			}
		}
		// RFC 6062: a TCP allocation's Connect, over the TCP listener only.
		if transport == "tcp" {
			c := allocateOver(t, tb, "tcp", false, true)
			for _, tg := range append(targets, peer) {
				if tg.addr.Addr().Is4() {
					_, err := c.Connect(tg.addr)
					fmt.Fprintf(&table, "tcp  %-34s connect %s\n", tg.name, code(err))
				}
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // let anything relayed arrive
	t.Logf("outcomes (error code, or ok):\n%s", table.String())
	for _, tg := range targets {
		if n, m := tg.datagrams.Load(), tg.conns.Load(); n != 0 || m != 0 {
			t.Errorf("%s (%v) received %d datagrams and %d connections through the relay", tg.name, tg.addr, n, m)
		}
	}
	// Per transport: a Send indication and ChannelData; and one connection.
	if n, m := peer.datagrams.Load(), peer.conns.Load(); n != 4 || m != 1 {
		t.Errorf("the allowed peer received %d datagrams (want 4) and %d connections (want 1): the matrix proves nothing", n, m)
	}
	m := metrics(t, r)
	if m[`ebrtc_turn_dropped_total{reason="refused_peer"}`] == 0 {
		t.Error("no refused datagram was counted")
	}
	if m[`ebrtc_turn_error_responses_total{code="403",method="ChannelBind"}`] == 0 {
		t.Error("refused channel binds were not answered 403")
	}
}

// tryRelay asks for peer every way a UDP allocation can and reports the
// error codes: permission, channel bind, then a Send indication and a
// ChannelData message whatever the answers were.
func tryRelay(t *testing.T, c *turnclient.Client, peer netip.AddrPort, ch uint16) string {
	t.Helper()
	perm := c.CreatePermission(peer)
	bind := c.ChannelBind(peer, ch)
	if err := c.Send(peer, []byte("send-indication")); err != nil {
		t.Fatal(err)
	}
	if err := c.SendChannelData(ch, []byte("channel-data")); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("permission %s bind %s", code(perm), code(bind))
}

func code(err error) string {
	if err == nil {
		return "ok"
	}
	if c := turnclient.Code(err); c != 0 {
		return fmt.Sprint(c)
	}
	return err.Error()
}

// allocateOver makes an allocation with the minimal client over a UDP or a
// TCP connection from the client namespace; tcp asks for an RFC 6062 one.
func allocateOver(t *testing.T, tb *testbed.Testbed, transport string, v6, tcpRelay bool) *turnclient.Client {
	t.Helper()
	var conn net.PacketConn
	switch transport {
	case "udp":
		u, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		if err != nil {
			t.Fatal(err)
		}
		conn = u
	case "tcp":
		var c net.Conn
		if err := tb.Client.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", server4.String(), 2*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(c)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := turnclient.AllocateWith(conn, server4, turnclient.Options{User: user, Password: pass, V6: v6, TCP: tcpRelay})
	if err != nil {
		t.Fatalf("allocate over %s (v6 %v, tcp %v): %v", transport, v6, tcpRelay, err)
	}
	return c
}

func withoutFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
