package turnserver_test

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Floods of malformed datagrams and of Allocate requests at the listener,
// while a client streams to a peer: the stream loses nothing, a new client
// still gets an allocation, and every flooded datagram is counted.
func TestFloodsWhileStreaming(t *testing.T) {
	for _, mode := range []string{"xdp", "off"} {
		t.Run(mode, func(t *testing.T) {
			tb, r, c, peer := streamingRelay(t, mode, "--user", "bob:bobs-password")
			before := metrics(t, r)

			junk := startFlood(t, tb, floodMalformed)
			allocs := startFlood(t, tb, floodAllocate)
			res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 6000, 200, 2000)
			requireExchange(t, "client to peer during the floods", res, err)
			res, err = testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 6000, 200, 2000)
			requireExchange(t, "peer to client during the floods", res, err)
			// Responsive: a new client completes an allocation mid-flood, on
			// the flooded listener (from another address and account: the
			// flooding ones are at their limits).
			testenv.Must(t, tb.Client.IP("addr", "add", "10.201.1.3/24", "dev", testbed.ClientIface, "nodad"))
			late := newClientOver(t, tb, testbed.ClientOptions{Server: server4, Local: netip.MustParseAddr("10.201.1.3"),
				User: "bob", Pass: "bobs-password"})
			late.Close()
			sentJunk, sentAllocs := junk.stop(), allocs.stop()

			// Every malformed datagram is dropped by the server and counted, or
			// lost at a full socket buffer, which the kernel counts.
			after := waitMetric(t, r, "the flood counted", func(m testbed.Metrics) bool {
				return dropped(m, before)+socketDrops(m, before) >= float64(sentJunk)
			})
			t.Logf("%s: socket buffers overflowed for %v datagrams", mode, socketDrops(after, before))
			t.Logf("%s: %d malformed datagrams and %d Allocate requests at %d/s each; dropped as malformed %v; "+
				"Allocate answered 486 %v times, 437 (5-tuple in use) %v times; refused for the source's rate %v, the user's quota %v",
				mode, sentJunk, sentAllocs, floodRate, dropped(after, before),
				after[`ebrtc_turn_error_responses_total{code="486",method="Allocate"}`],
				after[`ebrtc_turn_error_responses_total{code="437",method="Allocate"}`],
				after[`ebrtc_turn_allocations_refused_total{reason="ip_rate"}`], after[`ebrtc_turn_allocations_refused_total{reason="user_quota"}`])
			if d := dropped(after, before); d > float64(sentJunk) {
				t.Errorf("%v drops counted for %d malformed datagrams", d, sentJunk)
			}
			if after[`ebrtc_turn_allocations_refused_total{reason="ip_rate"}`] == 0 {
				t.Error("no allocation was refused for the flooding source's rate")
			}
			if strings.Count(r.Output(), "\n") > 200 {
				t.Errorf("the floods filled the log (%d lines): counters, not lines, for each datagram", strings.Count(r.Output(), "\n"))
			}
		})
	}
}

func socketDrops(m, before testbed.Metrics) float64 {
	k := `ebrtc_turn_socket_drops_total{socket="listener"}`
	return m[k] - before[k]
}

func dropped(m, before testbed.Metrics) float64 {
	var n float64
	for _, reason := range []string{"malformed", "channel_length"} {
		k := `ebrtc_turn_dropped_total{reason="` + reason + `"}`
		n += m[k] - before[k]
	}
	return n
}

const floodRate = 10000 // datagrams a second, per flood

type floodKind int

const (
	floodMalformed floodKind = iota // short, truncated, bogus lengths, random bytes
	floodAllocate                   // authenticated Allocates from ever new ports of one IP
)

type flood struct {
	done chan int
	quit chan struct{}
}

func (f *flood) stop() int {
	close(f.quit)
	return <-f.done
}

// startFlood sends at floodRate from the client namespace until stopped
// (at most 30 s).
func startFlood(t *testing.T, tb *testbed.Testbed, kind floodKind) *flood {
	t.Helper()
	f := &flood{done: make(chan int, 1), quit: make(chan struct{})}
	var conns []*net.UDPConn
	for range 64 {
		conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		testenv.Must(t, err)
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	var allocate []byte
	if kind == floodAllocate {
		allocate = authenticatedAllocate(t, tb)
	}
	go func() {
		rng := rand.New(rand.NewPCG(uint64(kind), 1))
		sent := 0
		start := time.Now()
		dst := net.UDPAddrFromAddrPort(server4)
		for time.Since(start) < 30*time.Second {
			select {
			case <-f.quit:
				f.done <- sent
				return
			default:
			}
			conn := conns[sent%len(conns)]
			var b []byte
			if kind == floodMalformed {
				b = malformed(rng)
			} else {
				b = withNewTransaction(allocate, rng)
			}
			if _, err := conn.WriteTo(b, dst); err == nil {
				sent++
			}
			if sent%100 == 0 {
				time.Sleep(time.Until(start.Add(time.Duration(sent) * time.Second / floodRate)))
			}
		}
		f.done <- sent
	}()
	return f
}

// malformed is one datagram that is neither STUN nor valid ChannelData.
func malformed(rng *rand.Rand) []byte {
	switch rng.IntN(4) {
	case 0: // too short for any header
		return []byte{0x40, 0x00, 0x00}[:rng.IntN(4)]
	case 1: // STUN header claiming more than the datagram holds
		b := make([]byte, 20+rng.IntN(40))
		binary.BigEndian.PutUint16(b, 0x0003)
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)+4))
		binary.BigEndian.PutUint32(b[4:], 0x2112A442)
		return b
	case 2: // ChannelData whose length runs past the datagram
		b := make([]byte, 8+rng.IntN(100))
		binary.BigEndian.PutUint16(b, 0x4000+uint16(rng.IntN(0x3fff)))
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		return b
	default: // random bytes starting with 0b10 or 0b11 (RTP, DTLS: not TURN)
		b := make([]byte, 12+rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[0] |= 0x80
		return b
	}
}

// authenticatedAllocate is an Allocate request with valid credentials and
// a fresh nonce, whose transaction id the flood replaces.
func authenticatedAllocate(t *testing.T, tb *testbed.Testbed) []byte {
	t.Helper()
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	testenv.Must(t, err)
	defer conn.Close()
	// The 401 to an unauthenticated request brings realm and nonce.
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}})
	testenv.Must(t, err)
	_, err = conn.WriteTo(m.Raw, net.UDPAddrFromAddrPort(server4))
	testenv.Must(t, err)
	buf := make([]byte, 1500)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _, err := conn.ReadFrom(buf)
	testenv.Must(t, err)
	res := &stun.Message{Raw: buf[:n]}
	testenv.Must(t, res.Decode())
	var realm stun.Realm
	var nonce stun.Nonce
	testenv.Must(t, realm.GetFrom(res))
	testenv.Must(t, nonce.GetFrom(res))
	req, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}},
		stun.NewUsername(user), realm, nonce)
	testenv.Must(t, err)
	return req.Raw
}

// withNewTransaction copies an unsigned request with another transaction
// id, then signs it (the integrity covers the id).
func withNewTransaction(raw []byte, rng *rand.Rand) []byte {
	m := &stun.Message{Raw: append([]byte(nil), raw...)}
	if m.Decode() != nil {
		return raw
	}
	for i := range m.TransactionID {
		m.TransactionID[i] = byte(rng.Uint32())
	}
	m.WriteTransactionID()
	var realm stun.Realm
	_ = realm.GetFrom(m)
	_ = stun.NewLongTermIntegrity(user, realm.String(), pass).AddTo(m)
	_ = stun.Fingerprint.AddTo(m)
	return m.Raw
}

// kill -9 during traffic: the kernel drops the process's XDP attachments
// and maps with it, the stream falls back to nothing rather than to a stale
// fast path, and a restarted server relays again from scratch.
func TestKillDuringTraffic(t *testing.T) {
	tb := newTestbed(t)
	r, err := tb.StartRelay(testbed.SharedEbrtc(t), testbed.TURNArgs(user+":"+pass)...)
	testenv.Must(t, err)
	c, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{Server: server4, Local: testbed.ClientIP4,
		User: user, Pass: pass, Realm: "ebrtc.test"})
	testenv.Must(t, err)
	defer c.Close()
	peer := newPeer(t, tb, testbed.PeerIP4)
	bindChannel(t, r, c, peer, 1)

	sent := make(chan error, 1)
	go func() {
		_, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 4000, 200, 2000)
		sent <- err
	}()
	time.Sleep(500 * time.Millisecond)
	testenv.Must(t, syscall.Kill(r.Pid(), syscall.SIGKILL))
	<-sent
	_ = r.Stop(time.Second)

	for _, ifc := range []string{testbed.ServerCliIface, testbed.ServerPeerIface} {
		if _, err := testbed.XDPMapEntries(tb.Server, ifc); err == nil || !strings.Contains(err.Error(), "no XDP program") {
			t.Errorf("%s after kill -9: %v (want no XDP program left)", ifc, err)
		}
	}
	// After the kill nothing relays: no stale fast path for a dead allocation.
	for range 10 {
		if _, err := c.Relay.WriteTo([]byte("after-kill-000000"), peer.LocalAddr()); err != nil {
			t.Fatalf("the client could not send after the kill: %v", err)
		}
	}
	if n := countMarked(peer, []byte("after-kill")); n != 0 {
		t.Errorf("%d datagrams relayed with the server killed", n)
	}

	r2 := startRelay(t, tb)
	c2 := newClient(t, tb, turn.RequestedAddressFamilyIPv4)
	bindChannel(t, r2, c2, peer, 1)
	before := metrics(t, r2)
	res, err := testbed.Exchange(c2.Relay, peer.LocalAddr(), peer, 2000, 200)
	requireExchange(t, "after the restart", res, err)
	if fast, _ := fastShare(before, metrics(t, r2), "client_to_peer"); fast < 0.99*2000 {
		t.Errorf("after the restart %v of 2000 on the fast path", fast)
	}
	entries, err := testbed.XDPMapEntries(tb.Server, testbed.ServerCliIface)
	testenv.Must(t, err)
	if entries["client_routes_v"] != 1 || entries["peer_routes_v4"] != 1 {
		t.Errorf("after the restart the maps hold %v, want exactly the one live channel", entries)
	}
}
