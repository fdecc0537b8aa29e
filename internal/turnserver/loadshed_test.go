package turnserver

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/pion/logging"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ebrtc/ebrtc/internal/metrics"
)

// A bad fleet setting fails at start, naming its key and why.
func TestLoadSheddingConfig(t *testing.T) {
	base := []string{"--user", "a:b", "--listen", "udp://192.0.2.1:3478", "--listen", "tcp://[2001:db8::1]:3478"}
	shed := []string{"--shed-above-allocations", "100"}
	cases := []struct {
		name      string
		args      []string
		key, want string // want "" : accepted
	}{
		{"valid", append([]string{"--alternate-server", "192.0.2.2:3478", "--alternate-server", "[2001:db8::2]:3478"}, shed...), "", ""},
		{"another port of this host", append([]string{"--alternate-server", "192.0.2.1:3479"}, shed...), "", ""},
		{"explicit loopback", append([]string{"--alternate-server", "127.0.0.1:3479"}, shed...), "", ""},
		{"threshold without alternate", shed, "shed-above-allocations", "needs alternate-server"},
		{"alternate without threshold", []string{"--alternate-server", "192.0.2.2:3478"}, "alternate-server", "needs shed-above-allocations"},
		{"negative threshold", []string{"--shed-above-allocations", "-1"}, "shed-above-allocations", "negative"},
		{"unparsable", append([]string{"--alternate-server", "turn2.example.org:3478"}, shed...), "alternate-server", "not IP:PORT"},
		{"no port", append([]string{"--alternate-server", "192.0.2.2"}, shed...), "alternate-server", "not IP:PORT"},
		{"port 0", append([]string{"--alternate-server", "192.0.2.2:0"}, shed...), "alternate-server", "port 0"},
		{"unspecified", append([]string{"--alternate-server", "0.0.0.0:3478"}, shed...), "alternate-server", "cannot be sent"},
		{"multicast", append([]string{"--alternate-server", "[ff02::1]:3478"}, shed...), "alternate-server", "cannot be sent"},
		{"two IPv4", append([]string{"--alternate-server", "192.0.2.2:3478", "--alternate-server", "192.0.2.3:3478"}, shed...), "alternate-server", "more than one IPv4"},
		{"own listener", append([]string{"--alternate-server", "192.0.2.1:3478"}, shed...), "alternate-server", "own listener"},
		{"own IPv6 listener", append([]string{"--alternate-server", "[2001:db8::1]:3478"}, shed...), "alternate-server", "own listener"},
		{"tls without tls listener", append([]string{"--tls-alternate-server", "192.0.2.2:5349"}, shed...), "tls-alternate-server", "no [tls dtls] listener"},
		{"threshold at total-quota", append([]string{"--alternate-server", "192.0.2.2:3478", "--total-quota", "100"}, shed...), "shed-above-allocations", "not below total-quota"},
	}
	for _, tc := range cases {
		_, err := Load(append(slices.Clone(base), tc.args...), noEnv)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), "config: "+tc.key+": ") || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one naming %s and saying %q", tc.name, err, tc.key, tc.want)
		}
	}
}

// A wildcard listener is reached at every address of the host: an
// alternate on its port at a relay, external or loopback address is itself.
func TestLoadSheddingOwnWildcardListener(t *testing.T) {
	base := []string{"--user", "a:b", "--listen", "udp://0.0.0.0:3478", "--relay-ip", "10.0.0.5", "--external-ip", "203.0.113.5",
		"--shed-above-allocations", "10"}
	for _, alt := range []string{"10.0.0.5:3478", "203.0.113.5:3478", "127.0.0.1:3478"} {
		if _, err := Load(append(slices.Clone(base), "--alternate-server", alt), noEnv); err == nil || !strings.Contains(err.Error(), "own listener") {
			t.Errorf("%s: %v, want it refused as the server's own listener", alt, err)
		}
	}
	if _, err := Load(append(slices.Clone(base), "--alternate-server", "10.0.0.6:3478"), noEnv); err != nil {
		t.Errorf("another host: %v", err)
	}
}

// The alternate of the client's family comes first; a client of a family
// without one is not redirected; loopback is for loopback clients only.
func TestAlternatesForClient(t *testing.T) {
	both := alternates{v4: netip.MustParseAddrPort("192.0.2.2:3478"), v6: netip.MustParseAddrPort("[2001:db8::2]:3478")}
	only6 := alternates{v6: both.v6}
	loop := alternates{v4: netip.MustParseAddrPort("127.0.0.1:3479"), v6: both.v6}
	cases := []struct {
		name   string
		alts   alternates
		client string
		want   []string
	}{
		{"IPv4 client", both, "198.51.100.7", []string{"192.0.2.2:3478", "[2001:db8::2]:3478"}},
		{"IPv6 client", both, "2001:db8:1::7", []string{"[2001:db8::2]:3478", "192.0.2.2:3478"}},
		{"no alternate of the client's family", only6, "198.51.100.7", nil},
		{"loopback alternate, remote client", loop, "198.51.100.7", nil},
		{"loopback alternate, loopback client", loop, "127.0.0.1", []string{"127.0.0.1:3479", "[2001:db8::2]:3478"}},
		{"remote alternate, IPv6 client, loopback spare left out", loop, "2001:db8:1::7", []string{"[2001:db8::2]:3478"}},
	}
	for _, tc := range cases {
		var got []string
		for _, a := range tc.alts.forClient(netip.MustParseAddr(tc.client)) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Below the threshold nothing moves; at it, udp/tcp clients go to
// alternate-server and tls/dtls clients to tls-alternate-server, and each
// redirect is counted.
func TestLoadShedderRedirect(t *testing.T) {
	events := metrics.NewEvents()
	held := 0
	l := &loadShedder{
		threshold: 2,
		plain:     alternates{v4: netip.MustParseAddrPort("192.0.2.2:3478")},
		secure:    alternates{v4: netip.MustParseAddrPort("192.0.2.2:5349")},
		listeners: []Listener{
			{Scheme: "udp", Addr: netip.MustParseAddrPort("0.0.0.0:3478")},
			{Scheme: "tcp", Addr: netip.MustParseAddrPort("0.0.0.0:3478")},
			{Scheme: "tls", Addr: netip.MustParseAddrPort("192.0.2.1:5349")},
			{Scheme: "dtls", Addr: netip.MustParseAddrPort("192.0.2.1:5349")},
		},
		load:   func() int { return held },
		events: events,
		log:    logging.NewDefaultLoggerFactory().NewLogger("test"),
	}
	client := &net.UDPAddr{IP: net.ParseIP("198.51.100.7"), Port: 40000}
	at := func(network, addr string) net.Addr {
		ap := netip.MustParseAddrPort(addr)
		if network == "tcp" {
			return net.TCPAddrFromAddrPort(ap)
		}
		return net.UDPAddrFromAddrPort(ap)
	}
	held = 1
	if got := l.redirect("u", "r", client, at("udp", "192.0.2.1:3478")); got != nil {
		t.Fatalf("below the threshold: redirected to %v", got)
	}
	held = 2
	for _, tc := range []struct{ network, dst, want string }{
		{"udp", "192.0.2.1:3478", "192.0.2.2:3478"},
		{"tcp", "192.0.2.1:3478", "192.0.2.2:3478"},
		{"tcp", "192.0.2.1:5349", "192.0.2.2:5349"},
		{"udp", "192.0.2.1:5349", "192.0.2.2:5349"},
	} {
		got := l.redirect("u", "r", client, at(tc.network, tc.dst))
		if len(got) != 1 || got[0].String() != tc.want {
			t.Errorf("%s client at %s: redirected to %v, want %s", tc.network, tc.dst, got, tc.want)
		}
	}
	if n := testutil.ToFloat64(events.Redirects); n != 4 {
		t.Errorf("redirects counted: %v, want 4", n)
	}
}

// Servers with the same credentials share the key of their nonces, so a
// nonce from one is good at another (libwebrtc keeps it when redirected).
func TestFleetNonceKey(t *testing.T) {
	key := func(args ...string) string {
		t.Helper()
		s, err := Load(args, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		return string(fleetNonceKey(s))
	}
	if key("--auth-secret", "s1", "--listen", "udp://192.0.2.1:3478") != key("--auth-secret", "s1", "--listen", "udp://192.0.2.2:3478") {
		t.Error("two servers with one auth-secret have different nonce keys")
	}
	if key("--auth-secret", "s1") == key("--auth-secret", "s2") {
		t.Error("another auth-secret, the same nonce key")
	}
	if key("--user", "a:1", "--user", "b:2") != key("--user", "b:2", "--user", "a:1") {
		t.Error("the order of the users changes the nonce key")
	}
	if key("--user", "a:1") == key("--user", "a:2") || key("--user", "a:1") == key("--user", "a:1", "--realm", "other") {
		t.Error("other passwords or another realm, the same nonce key")
	}
	if n := len(key("--user", "a:1")); n < 16 {
		t.Errorf("nonce key of %d bytes; pion takes 16 or more", n)
	}
}
