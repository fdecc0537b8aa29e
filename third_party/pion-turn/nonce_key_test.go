// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

//go:build !js

package turn

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5/internal/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Servers sharing a NonceKey accept each other's nonces; others answer 438.
func TestServerNonceKey(t *testing.T) {
	key := bytes.Repeat([]byte{42}, 32)
	newServer := func(nonceKey []byte) net.Addr {
		t.Helper()
		conn, err := net.ListenPacket("udp4", "127.0.0.1:0") // nolint: noctx
		require.NoError(t, err)
		server, err := NewServer(ServerConfig{
			AuthHandler: func(ra *RequestAttributes) (string, []byte, bool) {
				return ra.Username, GenerateAuthKey(ra.Username, "pion.ly", "pass"), true
			},
			Realm: "pion.ly",
			PacketConnConfigs: []PacketConnConfig{{
				PacketConn: conn,
				RelayAddressGenerator: &RelayAddressGeneratorStatic{
					RelayAddress: net.ParseIP("127.0.0.1"),
					Address:      "127.0.0.1",
				},
			}},
			NonceKey:      nonceKey,
			LoggerFactory: logging.NewDefaultLoggerFactory(),
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = server.Close() })

		return conn.LocalAddr()
	}
	first, second, other := newServer(key), newServer(key), newServer(nil)

	client, err := net.ListenPacket("udp4", "127.0.0.1:0") // nolint: noctx
	require.NoError(t, err)
	defer client.Close() //nolint:errcheck
	allocate := func(to net.Addr, auth ...stun.Setter) *stun.Message {
		t.Helper()
		msg := stun.MustBuild(append([]stun.Setter{
			stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
			proto.RequestedTransport{Protocol: proto.ProtoUDP},
		}, auth...)...)
		_, err := client.WriteTo(msg.Raw, to)
		require.NoError(t, err)
		require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
		buf := make([]byte, 1500)
		n, _, err := client.ReadFrom(buf)
		require.NoError(t, err)
		res := &stun.Message{Raw: buf[:n]}
		require.NoError(t, res.Decode())

		return res
	}
	var nonce stun.Nonce
	require.NoError(t, nonce.GetFrom(allocate(first)))
	withNonce := func() []stun.Setter {
		return []stun.Setter{
			stun.NewUsername("user"), stun.NewRealm("pion.ly"), nonce,
			stun.NewLongTermIntegrity("user", "pion.ly", "pass"),
		}
	}
	assert.Equal(t, stun.ClassSuccessResponse, allocate(second, withNonce()...).Type.Class,
		"a server sharing the key takes the first server's nonce")
	var code stun.ErrorCodeAttribute
	require.NoError(t, code.GetFrom(allocate(other, withNonce()...)))
	assert.Equal(t, stun.CodeStaleNonce, code.Code, "a server with a key of its own refuses it")

	_, err = NewServer(ServerConfig{NonceKey: key[:8], PacketConnConfigs: []PacketConnConfig{{
		PacketConn:            client,
		RelayAddressGenerator: &RelayAddressGeneratorNone{Address: "127.0.0.1"},
	}}})
	assert.Error(t, err, "a short key is refused")
}
