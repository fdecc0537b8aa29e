package turnserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// The fleet: two `ebrtc turn` servers sharing one TURN REST secret, the
// second in a namespace of its own (testbed.AddServer). The first holds one
// allocation, then sends new ones to the second.
const fleetSecret = "fleet-secret"

var (
	alternate4 = netip.AddrPortFrom(testbed.Server2ClientIP4, 3478)
	alternate6 = netip.AddrPortFrom(testbed.Server2ClientIP6, 3478)
)

// startShedding starts the first server, shedding above one allocation to
// the second server's addresses.
func startShedding(t *testing.T, tb *testbed.Testbed) *testbed.Relay {
	t.Helper()
	args := append(testbed.TURNArgs(), "--auth-secret", fleetSecret, "--shed-above-allocations", "1",
		"--alternate-server", alternate4.String(), "--alternate-server", alternate6.String())
	r, err := tb.StartRelay(testbed.SharedEbrtc(t), args...)
	return stopAtCleanup(t, r, err)
}

// startSecondServer adds the second server's namespace and starts it there.
func startSecondServer(t *testing.T, tb *testbed.Testbed) *testbed.Relay {
	t.Helper()
	ns, err := tb.AddServer()
	if err != nil {
		testenv.Missing(t, "second server namespace: %v", err)
	}
	r, err := testbed.StartRelayIn(ns, testbed.SharedEbrtc(t), append(testbed.Server2TURNArgs(), "--auth-secret", fleetSecret)...)
	return stopAtCleanup(t, r, err)
}

func stopAtCleanup(t *testing.T, r *testbed.Relay, err error) *testbed.Relay {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(5 * time.Second); err != nil {
			t.Errorf("relay stop: %v\n%s", err, r.Output())
		}
	})
	return r
}

// restCredentials are TURN REST credentials for id, valid for an hour on
// every server of the fleet.
func restCredentials(t *testing.T, id string) (string, string) {
	t.Helper()
	user, pass, err := turn.GenerateLongTermTURNRESTCredentials(fleetSecret, id, time.Hour)
	testenv.Must(t, err)
	return user, pass
}

// A loaded server redirects a new client to the alternate of its family with
// an authenticated 300; pion's client, which does not follow redirects,
// reports the 300 and then allocates where it names and relays there; coturn's
// turnutils_uclient follows the redirect by itself.
func TestFleetRedirect(t *testing.T) {
	tb := newTestbed(t)
	r2 := startSecondServer(t, tb)
	r1 := startShedding(t, tb)
	user1, pass1 := restCredentials(t, "first")
	newClientOver(t, tb, testbed.ClientOptions{Server: server4, User: user1, Pass: pass1}) // the load

	user2, pass2 := restCredentials(t, "second")
	requireTryAlternate(t, rawAllocate(t, tb, server4, user2, pass2), user2, pass2, alternate4, alternate6)
	requireTryAlternate(t, rawAllocate(t, tb, server6, user2, pass2), user2, pass2, alternate6, alternate4)

	_, err := testbed.NewTURNClient(tb.Client, testbed.ClientOptions{Server: server4, Local: testbed.ClientIP4,
		User: user2, Pass: pass2, Realm: "ebrtc.test"})
	var turnErr *stun.TurnError
	if !errors.As(err, &turnErr) || turnErr.ErrorCodeAttr.Code != stun.CodeTryAlternate {
		t.Fatalf("pion's client at the loaded server: %v, want a 300 Try Alternate", err)
	}
	c := newClientOver(t, tb, testbed.ClientOptions{Server: alternate4, User: user2, Pass: pass2})
	requireFastBothWays(t, r2, c, newPeer(t, tb, testbed.PeerIP4))

	m1, m2 := metrics(t, r1), metrics(t, r2)
	if got := m1["ebrtc_turn_allocate_redirects_total"]; got != 3 {
		t.Errorf("first server: %v redirects counted, want 3", got)
	}
	if got := m1.Labeled("ebrtc_turn_error_responses_total", map[string]string{"code": "300"}); got != 3 {
		t.Errorf("first server: %v error responses 300, want 3", got)
	}
	if m1["ebrtc_turn_allocations"] != 1 || m2["ebrtc_turn_allocations"] != 1 {
		t.Errorf("allocations: %v on the first server, %v on the second; want 1 and 1",
			m1["ebrtc_turn_allocations"], m2["ebrtc_turn_allocations"])
	}
	requireUclientFollows(t, tb, r1, r2)
}

// requireUclientFollows: turnutils_uclient's first Allocate (its probe)
// gets the 300 and the client runs its session on the second server,
// through which every message comes back from turnutils_peer.
func requireUclientFollows(t *testing.T, tb *testbed.Testbed, r1, r2 *testbed.Relay) {
	t.Helper()
	testenv.RequireCommand(t, "turnutils_uclient")
	testenv.RequireCommand(t, "turnutils_peer")
	peer, err := tb.StartTurnutilsPeer()
	testenv.Must(t, err)
	t.Cleanup(func() { _ = peer.Stop(2 * time.Second) })
	before1, before2 := metrics(t, r1), metrics(t, r2)
	user, pass := restCredentials(t, "uclient")
	const messages = 100
	lost, out, err := tb.RunTurnutilsUclient(user, pass, 1, messages, testbed.UclientChannels)
	if err != nil || lost != 0 {
		t.Fatalf("turnutils_uclient: lost %d, %v\n%s", lost, err, out)
	}
	after1, after2 := metrics(t, r1), metrics(t, r2)
	if got := after1["ebrtc_turn_allocate_redirects_total"] - before1["ebrtc_turn_allocate_redirects_total"]; got != 1 {
		t.Errorf("uclient: %v redirects, want 1 (its probe)\n%s", got, out)
	}
	relayed := func(m testbed.Metrics) float64 {
		return m.Packets("fast", "peer_to_client") + m.Packets("slow", "peer_to_client")
	}
	if got := relayed(after2) - relayed(before2); got < messages {
		t.Errorf("uclient: the second server relayed %v echoes, want %d\n%s", got, messages, out)
	}
	if got := relayed(after1) - relayed(before1); got != 0 {
		t.Errorf("uclient: the first server relayed %v echoes, want none", got)
	}
}

// rawAllocate sends an Allocate from the client namespace, then again with
// the credentials once the 401 brought realm and nonce, and returns the
// response to that second request as it came.
func rawAllocate(t *testing.T, tb *testbed.Testbed, server netip.AddrPort, user, pass string) *stun.Message {
	t.Helper()
	local := testbed.ClientIP4
	if server.Addr().Is6() {
		local = testbed.ClientIP6
	}
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(local, 0))
	testenv.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	transport := stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}}
	allocate := []stun.Setter{stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest), transport}
	challenge := roundTrip(t, conn, server, allocate...)
	var nonce stun.Nonce
	var realm stun.Realm
	if nonce.GetFrom(challenge) != nil || realm.GetFrom(challenge) != nil {
		t.Fatalf("no realm and nonce in %v", challenge)
	}
	return roundTrip(t, conn, server, append(allocate, stun.NewUsername(user), realm, nonce,
		stun.NewLongTermIntegrity(user, realm.String(), pass), stun.Fingerprint)...)
}

func roundTrip(t *testing.T, conn *net.UDPConn, server netip.AddrPort, setters ...stun.Setter) *stun.Message {
	t.Helper()
	req := stun.MustBuild(setters...)
	buf := make([]byte, 1500)
	for range 3 {
		_, err := conn.WriteToUDPAddrPort(req.Raw, server)
		testenv.Must(t, err)
		testenv.Must(t, conn.SetReadDeadline(time.Now().Add(time.Second)))
		n, err := conn.Read(buf)
		if err != nil {
			continue
		}
		res := &stun.Message{Raw: slices.Clone(buf[:n])}
		if res.Decode() == nil && res.TransactionID == req.TransactionID {
			return res
		}
	}
	t.Fatalf("no response from %v", server)
	return nil
}

// requireTryAlternate checks a response byte for byte as a client reads it:
// an Allocate error response 300, the alternates in order (the client's
// family first, RFC 8489 section 10) and a MESSAGE-INTEGRITY that the
// user's long-term key verifies.
func requireTryAlternate(t *testing.T, res *stun.Message, user, pass string, want ...netip.AddrPort) {
	t.Helper()
	if res.Type != stun.NewType(stun.MethodAllocate, stun.ClassErrorResponse) {
		t.Fatalf("response %v, want an Allocate error response", res)
	}
	var code stun.ErrorCodeAttribute
	if err := code.GetFrom(res); err != nil || code.Code != stun.CodeTryAlternate {
		t.Fatalf("error code %v (%v), want 300", code.Code, err)
	}
	var got []netip.AddrPort
	for _, a := range res.Attributes {
		if a.Type == stun.AttrAlternateServer {
			var alt stun.AlternateServer
			testenv.Must(t, alt.GetFrom(&stun.Message{Attributes: stun.Attributes{a}}))
			ip, _ := netip.AddrFromSlice(alt.IP)
			got = append(got, netip.AddrPortFrom(ip.Unmap(), uint16(alt.Port)))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ALTERNATE-SERVER %v, want %v", got, want)
	}
	if err := stun.NewLongTermIntegrity(user, "ebrtc.test", pass).Check(res); err != nil {
		t.Errorf("MESSAGE-INTEGRITY of the 300: %v", err)
	}
	if last := res.Attributes[len(res.Attributes)-1].Type; last != stun.AttrMessageIntegrity && last != stun.AttrFingerprint {
		t.Errorf("%v after MESSAGE-INTEGRITY: a client ignores it", last)
	}
}

// While the server sheds, its allocations carry on: Refresh, ChannelBind
// and CreatePermission succeed, data is relayed, and only a new Allocate
// is redirected; once the allocation is gone, the server takes new ones again.
func TestFleetSheddingKeepsAllocations(t *testing.T) {
	tb := newTestbed(t)
	r := startShedding(t, tb)
	user1, pass1 := restCredentials(t, "first")
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	testenv.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	held, err := turnclient.Allocate(conn, server4, user1, pass1, false)
	testenv.Must(t, err)

	user2, pass2 := restCredentials(t, "second")
	peer := newPeer(t, tb, testbed.PeerIP4)
	peerAddr := netip.MustParseAddrPort(peer.LocalAddr().String())
	for range 3 {
		requireTryAlternate(t, rawAllocate(t, tb, server4, user2, pass2), user2, pass2, alternate4, alternate6)
		testenv.Must(t, held.Refresh(10*time.Minute))
		testenv.Must(t, held.CreatePermission(peerAddr))
		testenv.Must(t, held.ChannelBind(peerAddr, 0x4000)) // a refresh after the first
		testenv.Must(t, held.Send(peerAddr, []byte("still relayed")))
		requireReceived(t, peer, "still relayed")
	}
	if got := metrics(t, r)["ebrtc_turn_allocate_redirects_total"]; got != 3 {
		t.Errorf("%v redirects counted, want 3", got)
	}

	testenv.Must(t, held.Release())
	waitMetric(t, r, "the allocation's removal", func(m testbed.Metrics) bool { return m["ebrtc_turn_allocations"] == 0 })
	newClientOver(t, tb, testbed.ClientOptions{Server: server4, User: user2, Pass: pass2})
}

func requireReceived(t *testing.T, c *net.UDPConn, want string) {
	t.Helper()
	buf := make([]byte, 1500)
	testenv.Must(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != want {
		t.Fatalf("peer read %q, %v; want %q", buf[:n], err, want)
	}
}

// Chromium follows the redirect too: two relay-only RTCPeerConnections
// given only the loaded server allocate on the second and call through it.
// libwebrtc repeats the Allocate at the alternate with the nonce it holds:
// the fleet's servers share their nonce key (fleetNonceKey).
func TestFleetBrowserRedirect(t *testing.T) {
	testenv.RequireCommand(t, "chromium")
	tb := newTestbed(t)
	r2 := startSecondServer(t, tb)
	r1 := startShedding(t, tb)
	user1, pass1 := restCredentials(t, "first")
	newClientOver(t, tb, testbed.ClientOptions{Server: server4, User: user1, Pass: pass1}) // the load
	before1 := metrics(t, r1)

	user, pass := restCredentials(t, "browser")
	res := browserCall(t, tb, "turn:"+server4.String()+"?transport=udp", user, pass)
	if res.CallerPair.Local != "relay" || res.CalleePair.Local != "relay" || res.FramesDecoded == 0 || res.MessagesReceived == 0 {
		t.Errorf("no relayed call: %+v", res)
	}
	m1, m2 := metrics(t, r1), metrics(t, r2)
	if got := m1["ebrtc_turn_allocate_redirects_total"] - before1["ebrtc_turn_allocate_redirects_total"]; got < 2 {
		t.Errorf("%v redirects, want one per RTCPeerConnection at least", got)
	}
	// Both relay addresses are on the second server: the media is hairpinned there.
	call := func(m testbed.Metrics) float64 {
		return m.Outcome("fast_hairpin") + m.Packets("slow", "client_to_peer")
	}
	if got := call(m1) - call(before1); got != 0 {
		t.Errorf("the loaded server relayed %v packets of the call", got)
	}
	if got := call(m2); got < 100 {
		t.Errorf("the second server relayed %v packets of the call", got)
	}
}

// browserCall runs testbed/browser/relay_call.mjs (a 4 s call) in the
// client namespace with one TURN server and returns what it saw.
func browserCall(t *testing.T, tb *testbed.Testbed, url, user, pass string) callResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := (testbed.BrowserScript{NS: tb.Client, Script: "relay_call.mjs", Args: []string{url, user, pass, "4"},
		Stdout: &stdout, Stderr: &stderr}).Run(t, ctx); err != nil {
		t.Fatalf("browser call: %v\nstderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res callResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("browser output %q: %v", stdout.String(), err)
	}
	t.Logf("browser: %+v", res)
	return res
}
