package offload

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The spoofing matrix: frames the kernel would drop (martian sources,
// reverse-path failures) or that match no channel reach the kernel untouched
// and are never relayed.
func TestSpoofedSourcesTakeTheKernelPath(t *testing.T) {
	forEachHook(t, func(t *testing.T, r *rig) {
		v4, v6 := families["v4"], families["v6"]
		// Two hairpinned clients per family, as two relay-only browsers.
		for _, f := range []testFamily{v4, v6} {
			testenv.Must(t, r.engine.AddChannel(Channel{Client: f.client, Server: f.server, Relay: f.relay, Peer: f.relayB, Number: 0x4000}))
			testenv.Must(t, r.engine.AddChannel(Channel{Client: f.clientB, Server: f.server, Relay: f.relayB, Peer: f.relay, Number: 0x4001}))
			testenv.Must(t, r.engine.AddChannel(channelFor(f, f, 0x4002)))
		}
		// Peers the policy refuses (our own listening address, special ranges),
		// installed here to show that the data plane refuses their sources on its own.
		specials := []netip.AddrPort{ap("10.10.1.1:60000"), ap("127.0.0.1:60000"), ap("0.1.2.3:60000"), ap("224.0.0.9:60000"), ap("255.255.255.255:60000"),
			ap("10.10.2.255:60000"), ap("[::1]:60000"), ap("[ff02::1]:60000")}
		for i, p := range specials {
			f := v4
			if p.Addr().Is6() {
				f = v6
			}
			testenv.Must(t, r.engine.AddChannel(Channel{Client: f.client, Server: f.server, Relay: f.relay, Peer: p, Number: uint16(0x4100 + i)}))
		}

		data := payload(64, 21)
		cases := []struct {
			name    string
			ingress string
			want    Outcome
			u       frame.UDP
		}{
			// A frame from the peer side claiming to come from client A's relay
			// address, towards client B's: the kernel drops it as a martian.
			{"own-relay-as-source-v4", "peer0", SlowMartianSource, frame.UDP{Src: v4.relay, Dst: v4.relayB, Payload: data}},
			{"own-relay-as-source-v6", "peer0", SlowMartianSource, frame.UDP{Src: v6.relay, Dst: v6.relayB, Payload: data}},
			// A bound peer's address arriving on the client side.
			{"peer-on-client-interface-v4", "cli0", SlowReversePath, frame.UDP{Src: v4.peer, Dst: v4.relay, Payload: data}},
			{"peer-on-client-interface-v6", "cli0", SlowReversePath, frame.UDP{Src: v6.peer, Dst: v6.relay, Payload: data}},
			// A client's 5-tuple and channel arriving on the peer side.
			{"client-on-peer-interface-v4", "peer0", SlowReversePath, frame.UDP{Src: v4.client, Dst: v4.server,
				Payload: frame.ChannelData(0x4002, data, 0, 0)}},
			{"client-on-peer-interface-v6", "peer0", SlowReversePath, frame.UDP{Src: v6.client, Dst: v6.server,
				Payload: frame.ChannelData(0x4002, data, 0, 0)}},
			// Unbound ports and other clients' channels match nothing.
			{"unbound-peer-port", "peer0", SlowUnknownPeer, frame.UDP{Src: ap("10.10.2.2:60001"), Dst: v4.relay, Payload: data}},
			{"unbound-relay-port", "peer0", SlowUnknownPeer, frame.UDP{Src: v4.peer, Dst: ap("10.10.2.1:50004"), Payload: data}},
			{"other-clients-channel", "cli0", SlowUnknownChannel, frame.UDP{Src: v4.clientB, Dst: v4.server,
				Payload: frame.ChannelData(0x4002, data, 0, 0)}},
			// Channels are installed unmapped, so an IPv4-mapped source never matches one.
			{"ipv4-mapped-source", "peer0", SlowUnknownPeer, frame.UDP{Src: ap("[::ffff:10.10.2.2]:60000"), Dst: v6.relay, Payload: data}},
		}
		for i, p := range specials {
			relay := v4.relay
			if p.Addr().Is6() {
				relay = v6.relay
			}
			cases = append(cases, struct {
				name    string
				ingress string
				want    Outcome
				u       frame.UDP
			}{fmt.Sprintf("special-source-%s-%d", p.Addr(), i), "peer0", SlowMartianSource, frame.UDP{Src: p, Dst: relay, Payload: data}})
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				in := r.from(tc.ingress, tc.u)
				for range 2 { // a refusal is never cached: the second is judged afresh
					r.expectOutcome(tc.want, func() {
						ret, out := r.run(tc.ingress, in)
						if ret != xdpPass || string(out) != string(in) {
							t.Errorf("action %d, frame changed %v: want XDP_PASS, untouched", ret, string(out) != string(in))
						}
					})
				}
			})
		}

		// The genuine frames of the same channels still take the fast path.
		r.expectOutcome(FastPeerToClient, func() {
			r.run("peer0", r.from("peer0", frame.UDP{Src: v4.peer, Dst: v4.relay, Payload: data}))
		})
		r.expectOutcome(FastHairpin, func() {
			r.run("cli0", r.from("cli0", frame.UDP{Src: v4.client, Dst: v4.server, Payload: frame.ChannelData(0x4000, data, 0, 0)}))
		})
		// A route now remembers that its peer passed on peer0; that verdict is
		// for peer0 only: the same source on the client side is still refused.
		r.expectOutcome(SlowReversePath, func() {
			r.run("cli0", r.from("cli0", frame.UDP{Src: v4.peer, Dst: v4.relay, Payload: data}))
		})
		r.expectOutcome(FastPeerToClient, func() {
			r.run("peer0", r.from("peer0", frame.UDP{Src: v4.peer, Dst: v4.relay, Payload: data}))
		})
	})
}

// A frame the interface sees only in promiscuous mode (another host's MAC)
// is left to the kernel, which drops it.
func TestFramesForOtherHostsTakeTheKernelPath(t *testing.T) {
	forEachHook(t, func(t *testing.T, r *rig) {
		v4 := families["v4"]
		ch := channelFor(v4, v4, 0x4500)
		testenv.Must(t, r.engine.AddChannel(ch))
		testenv.Must(t, r.engine.registerIface(Attachment{Index: r.ifs["peer0"].index, XDP: !r.tc, TC: r.tc, XDPEgress: !r.tc}, r.ifs["peer0"].mac))
		in := r.from("peer0", frame.UDP{Src: ch.Peer, Dst: ch.Relay, Payload: payload(20, 26)})
		r.expectOutcome(FastPeerToClient, func() { r.run("peer0", in) })
		other := bytes.Clone(in)
		other[5] ^= 0x01 // another unicast MAC
		r.expectOutcome(PassOtherHost, func() {
			if ret, out := r.run("peer0", other); ret != xdpPass || !bytes.Equal(out, other) {
				t.Errorf("frame for another host: action %d, changed %v", ret, !bytes.Equal(out, other))
			}
		})
	})
}

// A reverse-path verdict is cached for about a second: a route change
// reaches the fast path within the cache's lifetime.
func TestSourceVerdictFollowsRoutes(t *testing.T) {
	r := newRig(t)
	v4 := families["v4"]
	peer := ap("10.10.9.9:60000") // routed out of far0 at first
	testenv.Must(t, r.ns.IP("route", "add", "10.10.9.0/24", "via", "10.10.3.2", "dev", "far0"))
	testenv.Must(t, r.engine.AddChannel(Channel{Client: v4.client, Server: v4.server, Relay: v4.relay, Peer: peer, Number: 0x4200}))
	in := r.from("peer0", frame.UDP{Src: peer, Dst: v4.relay, Payload: payload(32, 22)})
	r.expectOutcome(SlowReversePath, func() { r.run("peer0", in) })

	testenv.Must(t, r.ns.IP("route", "replace", "10.10.9.0/24", "via", "10.10.2.2", "dev", "peer0"))
	deadline := time.Now().Add(3 * time.Second)
	for {
		before := r.outcomes()[FastPeerToClient].Packets
		r.run("peer0", in)
		if r.outcomes()[FastPeerToClient].Packets > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("source still refused 3 s after its route moved to the ingress interface")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// IPv4 datagrams the program originates without DF carry distinct
// identifications (RFC 6864), counted per route; with DF they carry 0.
func TestIPv4Identification(t *testing.T) {
	forEachHook(t, func(t *testing.T, r *rig) {
		v4 := families["v4"]
		ch := channelFor(v4, v4, 0x4300)
		testenv.Must(t, r.engine.AddChannel(ch))
		id := func(df bool) uint16 {
			_, out := r.run("peer0", r.from("peer0", frame.UDP{Src: ch.Peer, Dst: ch.Relay, DF: df, Payload: payload(20, 23)}))
			got, err := frame.Parse(out)
			testenv.Must(t, err)
			if got.DF != df {
				t.Fatalf("DF %v, sent %v", got.DF, df)
			}
			return got.ID
		}
		first := id(false)
		for i := 1; i <= 5; i++ {
			if got := id(false); got != first+uint16(i) {
				t.Fatalf("datagram %d: id %#x, want %#x (one more per datagram)", i, got, first+uint16(i))
			}
		}
		if got := id(true); got != 0 {
			t.Errorf("DF datagram: id %#x, want 0", got)
		}
		// Another route counts on its own, from its own start.
		other := channelFor(v4, v4, 0x4301)
		other.Peer = ap("10.10.2.2:60001")
		testenv.Must(t, r.engine.AddChannel(other))
		_, out := r.run("peer0", r.from("peer0", frame.UDP{Src: other.Peer, Dst: other.Relay, Payload: payload(20, 23)}))
		if got, err := frame.Parse(out); err != nil || got.ID == first+6 {
			t.Errorf("second route: %v, id %#x continues the first route's sequence", err, got.ID)
		}
	})
}

// The bandwidth limit: an allocation's channels share one bucket per
// direction, refilled at the rate; what exceeds it is dropped and counted.
func TestBandwidthLimit(t *testing.T) {
	// 8000 bit/s: 1000 bytes/s, a bucket of 3000 bytes (the minimum).
	r := newRigWith(t, func(c *Config) { c.RateLimit = mustLimit(t, 8000) })
	v4 := families["v4"]
	a := channelFor(v4, v4, 0x4400)
	b := a
	b.Number, b.Peer = 0x4401, ap("10.10.2.2:60001")
	testenv.Must(t, r.engine.AddChannel(a))
	testenv.Must(t, r.engine.AddChannel(b))
	toPeer := func(ch Channel) []byte {
		return r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, Payload: frame.ChannelData(ch.Number, payload(1000, 24), 0, 0)})
	}
	// Three 1000-byte datagrams fill the bucket, spread over both channels.
	for i, ch := range []Channel{a, b, a} {
		r.expectOutcome(FastClientToPeer, func() {
			if ret, _ := r.run("cli0", toPeer(ch)); ret != xdpRedirect {
				t.Fatalf("datagram %d within the burst: action %d", i, ret)
			}
		})
	}
	r.expectOutcome(DropRateLimit, func() {
		if ret, _ := r.run("cli0", toPeer(b)); ret != xdpDrop {
			t.Fatalf("datagram over the limit: action %d, want XDP_DROP", ret)
		}
	})
	if _, _, err := r.engine.ChannelStats(b); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := r.engine.ChannelStats(b); p.Dropped != 1 || p.Packets != 1 {
		t.Errorf("channel b counters: %+v, want 1 relayed and 1 dropped", p)
	}
	// The other direction has a bucket of its own.
	r.expectOutcome(FastPeerToClient, func() {
		r.run("peer0", r.from("peer0", frame.UDP{Src: a.Peer, Dst: a.Relay, Payload: payload(1000, 25)}))
	})
	// A second later, 1000 bytes more.
	time.Sleep(1100 * time.Millisecond)
	r.expectOutcome(FastClientToPeer, func() { r.run("cli0", toPeer(a)) })
	r.expectOutcome(DropRateLimit, func() { r.run("cli0", toPeer(a)) })

	// A new allocation (another client port) starts with a full bucket.
	c := a
	c.Client = v4.clientB
	testenv.Must(t, r.engine.AddChannel(c))
	r.expectOutcome(FastClientToPeer, func() { r.run("cli0", toPeer(c)) })
	// Removing the last channel frees the buckets; a re-added one is full again.
	testenv.Must(t, r.engine.RemoveChannel(a))
	testenv.Must(t, r.engine.RemoveChannel(b))
	testenv.Must(t, r.engine.AddChannel(a))
	for range 3 {
		r.expectOutcome(FastClientToPeer, func() { r.run("cli0", toPeer(a)) })
	}
}

func mustLimit(t testing.TB, bps uint64) ratelimit.Limit {
	l, err := ratelimit.FromBitrate(bps)
	testenv.Must(t, err)
	return l
}
