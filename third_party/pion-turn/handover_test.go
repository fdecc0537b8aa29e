// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

//go:build !js

package turn

import (
	"net"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dupPacketConn is a second descriptor of a UDP socket: the socket lives on
// while either is open, as it does when a process hands it to another.
func dupPacketConn(t *testing.T, c net.PacketConn) net.PacketConn {
	t.Helper()
	f, err := c.(*net.UDPConn).File()
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	dup, err := net.FilePacketConn(f)
	require.NoError(t, err)

	return dup
}

func handoverServer(t *testing.T, listener net.PacketConn) *Server {
	t.Helper()
	server, err := NewServer(ServerConfig{
		AuthHandler: func(ra *RequestAttributes) (string, []byte, bool) {
			return ra.Username, GenerateAuthKey(ra.Username, ra.Realm, "pass"), true
		},
		PacketConnConfigs: []PacketConnConfig{{
			PacketConn:            listener,
			RelayAddressGenerator: &RelayAddressGeneratorStatic{RelayAddress: net.IPv4(127, 0, 0, 1), Address: "127.0.0.1"},
		}},
		Realm:         "pion.ly",
		LoggerFactory: logging.NewDefaultLoggerFactory(),
	})
	require.NoError(t, err)

	return server
}

// An allocation exported by one server and imported by another on the same
// sockets goes on relaying both ways and can be refreshed and deleted.
func TestExportImportAllocations(t *testing.T) {
	listener, err := net.ListenPacket("udp4", "127.0.0.1:0") // nolint: noctx
	require.NoError(t, err)
	listenerCopy := dupPacketConn(t, listener)
	oldServer := handoverServer(t, listener)

	clientConn, err := net.ListenPacket("udp4", "127.0.0.1:0") // nolint: noctx
	require.NoError(t, err)
	defer func() { _ = clientConn.Close() }()
	client, err := NewClient(&ClientConfig{
		STUNServerAddr: listener.LocalAddr().String(), TURNServerAddr: listener.LocalAddr().String(),
		Conn: clientConn, Username: "user", Password: "pass", Realm: "pion.ly",
		LoggerFactory: logging.NewDefaultLoggerFactory(),
	})
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.Listen())
	relay, err := client.Allocate()
	require.NoError(t, err)

	peer, err := net.ListenPacket("udp4", "127.0.0.1:0") // nolint: noctx
	require.NoError(t, err)
	defer func() { _ = peer.Close() }()
	require.NoError(t, peer.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 1500)
	// The first write creates the permission; the client then binds a channel.
	_, err = relay.WriteTo([]byte("before"), peer.LocalAddr())
	require.NoError(t, err)
	n, _, err := peer.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "before", string(buf[:n]))
	require.Eventually(t, func() bool {
		states := oldServer.ExportAllocations()

		return len(states) == 1 && len(states[0].Channels) == 1
	}, 5*time.Second, 10*time.Millisecond)

	states := oldServer.ExportAllocations()
	state := states[0]
	assert.Equal(t, relay.LocalAddr().String(), state.RelayAddr.String())
	assert.Equal(t, "user", state.Username)
	assert.Len(t, state.Permissions, 1)
	assert.True(t, state.Expires.After(time.Now().Add(9*time.Minute)))
	assert.True(t, state.Channels[0].Expires.After(time.Now().Add(9*time.Minute)))
	assert.True(t, state.Permissions[0].Expires.After(time.Now().Add(4*time.Minute)))

	state.RelayConn = dupPacketConn(t, state.RelayConn)
	require.NoError(t, oldServer.Close())
	newServer := handoverServer(t, listenerCopy)
	defer func() { assert.NoError(t, newServer.Close()) }()
	require.NoError(t, newServer.ImportAllocation(state))
	require.ErrorIs(t, newServer.ImportAllocation(AllocationState{PacketConnConfig: 1}), errNoPacketConnConfig)
	require.Equal(t, 1, newServer.AllocationCount())

	// Both directions through the new server, on the channel the client bound.
	_, err = relay.WriteTo([]byte("after"), peer.LocalAddr())
	require.NoError(t, err)
	n, _, err = peer.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "after", string(buf[:n]))
	_, err = peer.WriteTo([]byte("back"), relay.LocalAddr())
	require.NoError(t, err)
	require.NoError(t, relay.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, _, err = relay.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "back", string(buf[:n]))

	// A permission for a new IP: the new server's nonce is new to the client
	// (a 438 and a retry). Then closing the relay sends a Refresh with
	// lifetime 0, with that nonce.
	peer2, err := net.ListenPacket("udp4", "127.0.0.2:0") // nolint: noctx
	require.NoError(t, err)
	defer func() { _ = peer2.Close() }()
	require.NoError(t, peer2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = relay.WriteTo([]byte("new peer"), peer2.LocalAddr())
	require.NoError(t, err)
	n, _, err = peer2.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "new peer", string(buf[:n]))
	require.NoError(t, relay.Close())
	require.Eventually(t, func() bool { return newServer.AllocationCount() == 0 }, 5*time.Second, 10*time.Millisecond)
}
