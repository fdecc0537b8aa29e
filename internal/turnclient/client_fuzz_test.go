package turnclient

import (
	"bytes"
	"crypto/md5" //nolint:gosec // RFC 8489 long-term credential key
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/pion/stun/v4"
)

// fuzzConn is a UDP socket whose server answers with the fuzzer's
// datagrams, one per read, and then is silent (a read times out at once):
// no network, no waiting.
type fuzzConn struct {
	replies [][]byte
	patch   []bool // give the reply the transaction id of the last request
	last    *stun.Message
	sent    []*stun.Message
	raw     [][]byte
	writes  int
	// accepted is, per request, the reply the client should take: the
	// first that decodes as STUN and carries the request's transaction id.
	accepted map[[stun.TransactionIDSize]byte]*stun.Message
}

var fuzzServer = &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 3478}

func (c *fuzzConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.writes++
	m := &stun.Message{Raw: bytes.Clone(p)}
	if err := m.Decode(); err != nil {
		return 0, errors.New("client sent a message that does not decode")
	}
	c.last = m
	c.sent = append(c.sent, m)
	return len(p), nil
}

func (c *fuzzConn) ReadFrom(p []byte) (int, net.Addr, error) {
	if len(c.replies) == 0 || c.last == nil {
		return 0, nil, os.ErrDeadlineExceeded
	}
	d := bytes.Clone(c.replies[0])
	if c.patch[0] && len(d) >= 20 {
		copy(d[8:20], c.last.TransactionID[:])
	}
	c.replies, c.patch = c.replies[1:], c.patch[1:]
	n := copy(p, d) // a datagram longer than the buffer is cut, as UDP does
	c.raw = append(c.raw, d[:n])
	if _, seen := c.accepted[c.last.TransactionID]; !seen && stun.IsMessage(d[:n]) {
		m := &stun.Message{Raw: bytes.Clone(d[:n])}
		if m.Decode() == nil && m.TransactionID == c.last.TransactionID {
			c.accepted[c.last.TransactionID] = m
		}
	}
	return n, fuzzServer, nil
}

func (c *fuzzConn) Close() error { return nil }
func (c *fuzzConn) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 40000}
}
func (c *fuzzConn) SetDeadline(t time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(t time.Time) error { return nil }

// splitReplies reads the fuzzer's bytes as datagrams: a flag byte (bit 0:
// patch in the request's transaction id), a 2-byte length, the bytes.
func splitReplies(b []byte) (replies [][]byte, patch []bool) {
	for len(b) >= 3 {
		flag, n := b[0], int(binary.BigEndian.Uint16(b[1:3]))
		b = b[3:]
		n = min(n, len(b))
		replies, patch = append(replies, b[:n]), append(patch, flag&1 != 0)
		b = b[n:]
	}
	return replies, patch
}

func joinReplies(msgs ...*stun.Message) []byte {
	var out []byte
	for _, m := range msgs {
		out = append(out, 1)
		out = binary.BigEndian.AppendUint16(out, uint16(len(m.Raw)))
		out = append(out, m.Raw...)
	}
	return out
}

// FuzzServerResponses: the client fed any datagrams as the server's
// answers (Allocate's 401 and success, CreatePermission, ChannelBind,
// Connect, Refresh) never panics
// and never loops; it takes only a reply that decodes and carries its
// request's transaction id; after a 401 it authenticates with exactly that
// realm and nonce (MESSAGE-INTEGRITY with the long-term key, FINGERPRINT);
// and an allocation it reports has the relayed address of the success
// response it took, as pion/stun reads it.
func FuzzServerResponses(f *testing.F) {
	var zero [stun.TransactionIDSize]byte
	build := func(setters ...stun.Setter) *stun.Message {
		m, err := stun.Build(append([]stun.Setter{stun.NewTransactionIDSetter(zero)}, setters...)...)
		if err != nil {
			f.Fatal(err)
		}
		return m
	}
	unauth := build(stun.NewType(stun.MethodAllocate, stun.ClassErrorResponse), stun.CodeUnauthorized,
		stun.NewRealm("ebrtc"), stun.NewNonce("n0nce"), stun.Fingerprint)
	relay := func(ap netip.AddrPort) stun.Setter {
		return xorAddr(stun.AttrXORRelayedAddress, ap)
	}
	allocated := build(stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse), relay(netip.MustParseAddrPort("192.0.2.1:50000")),
		rawAttr(stun.AttrLifetime, []byte{0, 0, 2, 0x58}), stun.Fingerprint)
	allocated6 := build(stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse), relay(netip.MustParseAddrPort("[2001:db8::1]:50000")))
	stale := build(stun.NewType(stun.MethodAllocate, stun.ClassErrorResponse), stun.CodeStaleNonce, stun.NewNonce("n0nce2"))
	bound := build(stun.NewType(stun.MethodChannelBind, stun.ClassSuccessResponse))
	refreshed := build(stun.NewType(stun.MethodRefresh, stun.ClassSuccessResponse))
	permitted := build(stun.NewType(stun.MethodCreatePermission, stun.ClassSuccessResponse))
	connected := build(stun.NewType(stun.MethodConnect, stun.ClassSuccessResponse), rawAttr(attrConnectionID, []byte{0, 0, 0x12, 0x34}))
	forbidden := build(stun.NewType(stun.MethodAllocate, stun.ClassErrorResponse), stun.CodeForbidden)

	f.Add(joinReplies(unauth, allocated, bound, refreshed), false)
	f.Add(joinReplies(unauth, allocated, permitted, bound, connected, refreshed, refreshed), false)
	f.Add(joinReplies(unauth, stale, allocated6, bound, refreshed), true)
	f.Add(joinReplies(unauth, forbidden), false)
	f.Add(joinReplies(unauth, stale, stale), false)
	f.Add(append([]byte{0, 0, 4, 1, 2, 3, 4}, joinReplies(unauth, allocated)...), false) // junk first
	f.Add([]byte{}, false)

	f.Fuzz(func(t *testing.T, data []byte, v6 bool) {
		replies, patch := splitReplies(data)
		if len(replies) > 32 {
			return
		}
		conn := &fuzzConn{replies: replies, patch: patch, accepted: map[[stun.TransactionIDSize]byte]*stun.Message{}}
		const user, password = "alice", "pw"
		c, err := Allocate(conn, netip.MustParseAddrPort("192.0.2.1:3478"), user, password, v6)
		// Each exchange is 3 tries at most; Allocate is one unauthenticated
		// and at most two authenticated exchanges (a stale nonce renewed once).
		if conn.writes > 9 {
			t.Fatalf("Allocate sent %d requests", conn.writes)
		}
		checkRequests(t, conn, user, password)
		if err != nil {
			if c != nil {
				t.Fatal("Allocate returned a client and an error")
			}
			return
		}
		last := conn.sent[len(conn.sent)-1]
		res := conn.accepted[last.TransactionID]
		if res == nil || res.Type.Class != stun.ClassSuccessResponse {
			t.Fatalf("allocation reported without a success response to request %x", last.TransactionID)
		}
		var relayed stun.XORMappedAddress
		if err := relayed.GetFromAs(res, stun.AttrXORRelayedAddress); err != nil {
			t.Fatalf("allocation reported from a response without a relayed address: %v", err)
		}
		want, _ := netip.AddrFromSlice(relayed.IP)
		if wantAP := netip.AddrPortFrom(want.Unmap(), uint16(relayed.Port)); c.Relay != wantAP || !c.Relay.IsValid() {
			t.Fatalf("relay %v, the response says %v", c.Relay, wantAP)
		}

		writes := conn.writes
		peer := netip.MustParseAddrPort("203.0.113.9:6000")
		_ = c.CreatePermission(peer)
		_ = c.ChannelBind(peer, 0x4001)
		if id, err := c.Connect(peer); err == nil {
			res := conn.accepted[conn.sent[len(conn.sent)-1].TransactionID]
			v, _ := res.Get(attrConnectionID)
			if len(v) != 4 || binary.BigEndian.Uint32(v) != id || res.Type.Class != stun.ClassSuccessResponse {
				t.Fatalf("Connect returned id %#x from %v", id, res)
			}
		}
		_ = c.Refresh(time.Minute)
		_ = c.Release()
		// Five exchanges, each of at most two authenticated attempts of three tries.
		if conn.writes-writes > 30 {
			t.Fatalf("five requests sent as %d datagrams", conn.writes-writes)
		}
		checkRequests(t, conn, user, password)
	})
}

// checkRequests: every authenticated request carries the realm and the
// latest nonce the server gave, and verifies with the long-term key.
func checkRequests(t *testing.T, conn *fuzzConn, user, password string) {
	t.Helper()
	var realm stun.Realm
	var nonce stun.Nonce
	authenticated := false
	for _, req := range conn.sent {
		if req.Type.Class != stun.ClassRequest {
			t.Fatalf("client sent a %v", req.Type)
		}
		if !req.Contains(stun.AttrMessageIntegrity) {
			continue
		}
		var r stun.Realm
		var n stun.Nonce
		var u stun.Username
		if r.GetFrom(req) != nil || n.GetFrom(req) != nil || u.GetFrom(req) != nil || u.String() != user {
			t.Fatalf("authenticated request without realm, nonce or username: %v", req)
		}
		key := md5.Sum([]byte(user + ":" + r.String() + ":" + password)) //nolint:gosec
		if err := stun.MessageIntegrity(key[:]).Check(req); err != nil {
			t.Fatalf("MESSAGE-INTEGRITY does not verify with the key of realm %q: %v", r, err)
		}
		if err := stun.Fingerprint.Check(req); err != nil {
			t.Fatalf("FINGERPRINT: %v", err)
		}
		realm, nonce, authenticated = r, n, true
	}
	if !authenticated {
		return
	}
	// The realm and nonce sent are ones the server gave.
	for _, v := range [][]byte{realm, nonce} {
		given := false
		for _, d := range conn.raw {
			given = given || bytes.Contains(d, v)
		}
		if !given {
			t.Fatalf("realm %q and nonce %q sent, no reply carried %q", realm, nonce, v)
		}
	}
}
