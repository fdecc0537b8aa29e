// Package turnclient is a minimal TURN client (RFC 8656) over a UDP socket
// that its caller keeps: it does the control exchanges (Allocate with
// long-term credentials, CreatePermission, ChannelBind, Refresh) and leaves
// the socket free for the caller's own ChannelData, e.g. sent in batches by a
// load generator. Messages are built with pion/stun.
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
}

// Timeout bounds each control exchange (3 tries).
const Timeout = 500 * time.Millisecond

var errNoResponse = errors.New("turnclient: no response")

// Allocate authenticates with long-term credentials and creates a UDP
// allocation, of the IPv6 family if v6 is set.
func Allocate(conn net.PacketConn, server netip.AddrPort, user, password string, v6 bool) (*Client, error) {
	c := &Client{conn: conn, server: net.UDPAddrFromAddrPort(server), user: stun.NewUsername(user), password: password}
	family := []byte{0x01, 0, 0, 0}
	if v6 {
		family[0] = 0x02
	}
	setters := []stun.Setter{
		stun.NewType(stun.MethodAllocate, stun.ClassRequest),
		rawAttr(stun.AttrRequestedTransport, []byte{17, 0, 0, 0}), // UDP
		rawAttr(stun.AttrRequestedAddressFamily, family),
	}
	// The first request is unauthenticated: the 401 brings realm and nonce.
	res, err := c.roundTrip(append([]stun.Setter{stun.TransactionID}, setters...)...)
	if err != nil {
		return nil, err
	}
	if err := c.learnAuth(res); err != nil {
		return nil, err
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
func (c *Client) Release() error {
	_, err := c.authenticated(
		stun.NewType(stun.MethodRefresh, stun.ClassRequest),
		rawAttr(stun.AttrLifetime, []byte{0, 0, 0, 0}),
	)
	return err
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
		if code.Code == stun.CodeStaleNonce && attempt == 0 {
			if err := c.nonce.GetFrom(res); err != nil {
				return nil, err
			}
			continue
		}
		return nil, fmt.Errorf("error response %d %s", code.Code, code.Reason)
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

// ChannelData prepends the 4-byte ChannelData header to data in buf (which
// must have room for it) and returns the message, unpadded (RFC 8656 12.5
// allows that over UDP).
func ChannelData(buf []byte, number uint16, data []byte) []byte {
	binary.BigEndian.PutUint16(buf, number)
	binary.BigEndian.PutUint16(buf[2:], uint16(len(data)))
	n := copy(buf[4:], data)
	return buf[:4+n]
}
