// Package turnclient is a minimal TURN client (RFC 8656) over a socket that
// its caller keeps: it does the control exchanges (Allocate with long-term
// credentials, CreatePermission, ChannelBind, Refresh, Send, RFC 6062
// Connect) and leaves the socket free for the caller's own ChannelData, e.g.
// sent in batches by a load generator. Unlike a full client it takes any
// request the caller asks for, which is what attack tests need, and reports
// error responses with their codes. Messages are built with pion/stun.
package turnclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pion/stun/v4"
)

// Client is one allocation on one TURN server.
type Client struct {
	conn      net.PacketConn
	server    net.Addr
	user      stun.Username
	realm     stun.Realm
	nonce     stun.Nonce
	integrity stun.MessageIntegrity
	password  string
	// Relay is the allocation's relayed transport address.
	Relay netip.AddrPort
	// KeepNonce turns off the automatic retry with a fresh nonce after a
	// 438 Stale Nonce, so the error reaches the caller.
	KeepNonce bool
}

// Options select what Allocate asks for.
type Options struct {
	User, Password string
	V6             bool          // an IPv6 relay (REQUESTED-ADDRESS-FAMILY)
	TCP            bool          // an RFC 6062 TCP allocation
	Lifetime       time.Duration // 0: the server's default
	// Realm, if set, replaces the realm the server announces in the
	// authenticated requests (to test a server's realm check).
	Realm string
}

// ErrorResponse is a STUN error response to a request.
type ErrorResponse struct {
	Code   int
	Reason string
}

func (e *ErrorResponse) Error() string { return fmt.Sprintf("error response %d %s", e.Code, e.Reason) }

// Code is the STUN error code of err, or 0 when it is not an error response.
func Code(err error) int {
	var er *ErrorResponse
	if errors.As(err, &er) {
		return er.Code
	}
	return 0
}

// Timeout bounds each control exchange (3 tries).
const Timeout = 500 * time.Millisecond

var errNoResponse = errors.New("turnclient: no response")

// Allocate authenticates with long-term credentials and creates a UDP
// allocation, of the IPv6 family if v6 is set.
func Allocate(conn net.PacketConn, server netip.AddrPort, user, password string, v6 bool) (*Client, error) {
	return AllocateWith(conn, server, Options{User: user, Password: password, V6: v6})
}

// AllocateWith creates an allocation as o asks. conn may be a UDP socket or
// a stream connection wrapped by turn.NewSTUNConn.
func AllocateWith(conn net.PacketConn, server netip.AddrPort, o Options) (*Client, error) {
	c := &Client{conn: conn, server: net.UDPAddrFromAddrPort(server), user: stun.NewUsername(o.User), password: o.Password}
	family := []byte{0x01, 0, 0, 0}
	if o.V6 {
		family[0] = 0x02
	}
	transport := byte(17) // UDP
	if o.TCP {
		transport = 6
	}
	setters := []stun.Setter{
		stun.NewType(stun.MethodAllocate, stun.ClassRequest),
		rawAttr(stun.AttrRequestedTransport, []byte{transport, 0, 0, 0}),
		rawAttr(stun.AttrRequestedAddressFamily, family),
	}
	if o.Lifetime > 0 {
		setters = append(setters, lifetime(o.Lifetime))
	}
	// The first request is unauthenticated: the 401 brings realm and nonce.
	res, err := c.roundTrip(append([]stun.Setter{stun.TransactionID}, setters...)...)
	if err != nil {
		return nil, err
	}
	if err := c.learnAuth(res); err != nil {
		return nil, err
	}
	if o.Realm != "" {
		c.realm = stun.NewRealm(o.Realm)
		c.integrity = stun.NewLongTermIntegrity(o.User, o.Realm, o.Password)
	}
	if res, err = c.authenticated(setters...); err != nil {
		return nil, fmt.Errorf("turnclient: allocate: %w", err)
	}
	var relayed stun.XORMappedAddress
	if err := relayed.GetFromAs(res, stun.AttrXORRelayedAddress); err != nil {
		return nil, fmt.Errorf("turnclient: allocate: no relayed address: %w", err)
	}
	addr, _ := netip.AddrFromSlice(relayed.IP)
	c.Relay = netip.AddrPortFrom(addr.Unmap(), uint16(relayed.Port))
	return c, nil
}

// ChannelBind binds number to peer (which also creates the permission).
func (c *Client) ChannelBind(peer netip.AddrPort, number uint16) error {
	_, err := c.authenticated(
		stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		rawAttr(stun.AttrChannelNumber, []byte{byte(number >> 8), byte(number), 0, 0}),
		xorAddr(stun.AttrXORPeerAddress, peer),
	)
	if err != nil {
		return fmt.Errorf("turnclient: channel bind %#x to %v: %w", number, peer, err)
	}
	return nil
}

// Release deletes the allocation (Refresh with LIFETIME 0).
func (c *Client) Release() error { return c.Refresh(0) }

// Refresh asks for the allocation to live d longer (0 deletes it).
func (c *Client) Refresh(d time.Duration) error {
	_, err := c.authenticated(stun.NewType(stun.MethodRefresh, stun.ClassRequest), lifetime(d))
	return err
}

// CreatePermission installs permissions for the peers' IP addresses.
func (c *Client) CreatePermission(peers ...netip.AddrPort) error {
	setters := []stun.Setter{stun.NewType(stun.MethodCreatePermission, stun.ClassRequest)}
	for _, p := range peers {
		setters = append(setters, xorAddr(stun.AttrXORPeerAddress, p))
	}
	if _, err := c.authenticated(setters...); err != nil {
		return fmt.Errorf("turnclient: create permission for %v: %w", peers, err)
	}
	return nil
}

// Send sends data to peer in a Send indication (which has no response).
func (c *Client) Send(peer netip.AddrPort, data []byte) error {
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
		xorAddr(stun.AttrXORPeerAddress, peer), rawAttr(stun.AttrData, data), stun.Fingerprint)
	if err != nil {
		return err
	}
	_, err = c.conn.WriteTo(m.Raw, c.server)
	return err
}

// Connect asks a TCP allocation for a connection to peer (RFC 6062) and
// returns its CONNECTION-ID.
func (c *Client) Connect(peer netip.AddrPort) (uint32, error) {
	res, err := c.authenticated(stun.NewType(stun.MethodConnect, stun.ClassRequest), xorAddr(stun.AttrXORPeerAddress, peer))
	if err != nil {
		return 0, fmt.Errorf("turnclient: connect to %v: %w", peer, err)
	}
	v, err := res.Get(attrConnectionID)
	if err != nil || len(v) != 4 {
		return 0, fmt.Errorf("turnclient: connect to %v: no CONNECTION-ID", peer)
	}
	return binary.BigEndian.Uint32(v), nil
}

// ConnectionBind binds a new stream connection of this client's (conn) to
// a connection the server made or accepted (RFC 6062); conn then carries
// the peer's bytes.
func (c *Client) ConnectionBind(conn net.PacketConn, id uint32) error {
	data := &Client{conn: conn, server: c.server, user: c.user, realm: c.realm, nonce: c.nonce,
		integrity: c.integrity, password: c.password}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], id)
	if _, err := data.authenticated(stun.NewType(stun.MethodConnectionBind, stun.ClassRequest), rawAttr(attrConnectionID, b[:])); err != nil {
		return fmt.Errorf("turnclient: connection bind %#x: %w", id, err)
	}
	return nil
}

const attrConnectionID stun.AttrType = 0x002A // RFC 6062

func lifetime(d time.Duration) stun.Setter {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(d/time.Second))
	return rawAttr(stun.AttrLifetime, b[:])
}

func (c *Client) learnAuth(res *stun.Message) error {
	var code stun.ErrorCodeAttribute
	if err := code.GetFrom(res); err != nil || code.Code != stun.CodeUnauthorized {
		return fmt.Errorf("turnclient: expected 401 to an unauthenticated request, got %v", res)
	}
	if err := c.realm.GetFrom(res); err != nil {
		return fmt.Errorf("turnclient: 401 without realm: %w", err)
	}
	if err := c.nonce.GetFrom(res); err != nil {
		return fmt.Errorf("turnclient: 401 without nonce: %w", err)
	}
	c.integrity = stun.NewLongTermIntegrity(c.user.String(), c.realm.String(), c.password)
	return nil
}

// authenticated sends a request with credentials, renewing a stale nonce once.
func (c *Client) authenticated(setters ...stun.Setter) (*stun.Message, error) {
	for attempt := 0; ; attempt++ {
		all := append([]stun.Setter{stun.TransactionID}, setters...)
		all = append(all, c.user, c.realm, c.nonce, c.integrity, stun.Fingerprint)
		res, err := c.roundTrip(all...)
		if err != nil {
			return nil, err
		}
		if res.Type.Class == stun.ClassSuccessResponse {
			return res, nil
		}
		var code stun.ErrorCodeAttribute
		_ = code.GetFrom(res)
		if code.Code == stun.CodeStaleNonce && attempt == 0 && !c.KeepNonce {
			if err := c.nonce.GetFrom(res); err != nil {
				return nil, err
			}
			continue
		}
		return nil, &ErrorResponse{Code: int(code.Code), Reason: string(code.Reason)}
	}
}

// roundTrip sends a request and waits for the response with its transaction
// id, skipping anything else that arrives (data on a busy socket).
func (c *Client) roundTrip(setters ...stun.Setter) (*stun.Message, error) {
	req, err := stun.Build(setters...)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1500)
	for try := 0; try < 3; try++ {
		if _, err := c.conn.WriteTo(req.Raw, c.server); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(Timeout)
		_ = c.conn.SetReadDeadline(deadline)
		for {
			n, _, err := c.conn.ReadFrom(buf)
			if err != nil {
				break // timeout: send again
			}
			if !stun.IsMessage(buf[:n]) {
				continue
			}
			res := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
			if res.Decode() == nil && res.TransactionID == req.TransactionID {
				_ = c.conn.SetReadDeadline(time.Time{})
				return res, nil
			}
		}
	}
	_ = c.conn.SetReadDeadline(time.Time{})
	return nil, errNoResponse
}

func rawAttr(t stun.AttrType, v []byte) stun.Setter {
	return stun.RawAttribute{Type: t, Value: v}
}

func xorAddr(t stun.AttrType, ap netip.AddrPort) stun.Setter {
	return setterFunc(func(m *stun.Message) error {
		return stun.XORMappedAddress{IP: ap.Addr().AsSlice(), Port: int(ap.Port())}.AddToAs(m, t)
	})
}

type setterFunc func(*stun.Message) error

func (f setterFunc) AddTo(m *stun.Message) error { return f(m) }

// SendChannelData sends data on a bound channel.
func (c *Client) SendChannelData(number uint16, data []byte) error {
	_, err := c.conn.WriteTo(ChannelData(make([]byte, 4+len(data)), number, data), c.server)
	return err
}

// ChannelData prepends the 4-byte ChannelData header to data in buf (which
// must have room for it) and returns the message, unpadded (RFC 8656 12.5
// allows that over UDP).
func ChannelData(buf []byte, number uint16, data []byte) []byte {
	binary.BigEndian.PutUint16(buf, number)
	binary.BigEndian.PutUint16(buf[2:], uint16(len(data)))
	n := copy(buf[4:], data)
	return buf[:4+n]
}
