// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package turn

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/pion/turn/v5/internal/allocation"
	"github.com/pion/turn/v5/internal/proto"
)

// AllocationState is a UDP allocation as ExportAllocations reports it and
// ImportAllocation takes it: enough for another Server, in a new process
// after an upgrade say, to go on serving the allocation on the same relay
// socket without the client noticing.
type AllocationState struct {
	// PacketConnConfig is the index in ServerConfig.PacketConnConfigs of
	// the listener the client talks to.
	PacketConnConfig int
	// ClientAddr and ServerAddr are the client's and the listener's
	// addresses (the 5-tuple, with UDP).
	ClientAddr, ServerAddr net.Addr
	// RelayAddr is the relayed transport address the client was given.
	RelayAddr net.Addr
	// RelayConn is the relay socket (the RelayAddressGenerator's).
	RelayConn     net.PacketConn
	Username      string
	Realm         string
	AddressFamily RequestedAddressFamily
	Expires       time.Time
	Permissions   []PermissionState
	Channels      []ChannelBindState
}

// PermissionState is a permission of an exported allocation.
type PermissionState struct {
	Addr    net.Addr
	Expires time.Time
}

// ChannelBindState is a channel binding of an exported allocation.
type ChannelBindState struct {
	Number  uint16
	Peer    net.Addr
	Expires time.Time
}

var errNoPacketConnConfig = errors.New("no such PacketConnConfig")

// ExportAllocations returns the state of the UDP allocations of the
// server's PacketConnConfigs. Stop the reads of the PacketConns first (the
// export is a snapshot), and keep the relay sockets open for the server
// that imports them.
func (s *Server) ExportAllocations() []AllocationState {
	var out []AllocationState
	for i := range s.packetConnConfigs {
		for _, st := range s.allocationManagers[i].Export() {
			exported := AllocationState{
				PacketConnConfig: i, ClientAddr: st.FiveTuple.SrcAddr, ServerAddr: st.FiveTuple.DstAddr,
				RelayAddr: st.RelayAddr, RelayConn: st.RelayConn, Username: st.UserID, Realm: st.Realm,
				AddressFamily: st.AddressFamily, Expires: st.Expires,
			}
			for _, p := range st.Permissions {
				exported.Permissions = append(exported.Permissions, PermissionState(p))
			}
			for _, c := range st.Channels {
				exported.Channels = append(exported.Channels, ChannelBindState{
					Number: uint16(c.Number), Peer: c.Peer, Expires: c.Expires,
				})
			}
			out = append(out, exported)
		}
	}

	return out
}

// ImportAllocation adds an allocation exported by another Server and starts
// relaying on its RelayConn. Lifetimes run on to the exported expiry times;
// the EventHandler sees the allocation, its permissions and its channels
// created. An allocation that has expired is refused.
func (s *Server) ImportAllocation(st AllocationState) error {
	if st.PacketConnConfig < 0 || st.PacketConnConfig >= len(s.packetConnConfigs) {
		return fmt.Errorf("%w: %d", errNoPacketConnConfig, st.PacketConnConfig)
	}
	imported := allocation.State{
		FiveTuple: &allocation.FiveTuple{Protocol: allocation.UDP, SrcAddr: st.ClientAddr, DstAddr: st.ServerAddr},
		RelayAddr: st.RelayAddr, RelayConn: st.RelayConn, UserID: st.Username, Realm: st.Realm,
		AddressFamily: st.AddressFamily, Expires: st.Expires,
	}
	for _, p := range st.Permissions {
		imported.Permissions = append(imported.Permissions, allocation.PermissionState(p))
	}
	for _, c := range st.Channels {
		imported.Channels = append(imported.Channels, allocation.ChannelState{
			Number: proto.ChannelNumber(c.Number), Peer: c.Peer, Expires: c.Expires,
		})
	}
	_, err := s.allocationManagers[st.PacketConnConfig].Import(imported, s.packetConnConfigs[st.PacketConnConfig].PacketConn)

	return err
}
