package turnserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/admin"
)

// savedState is what a server hands its successor (Upgrade) or keeps for
// the next start (Close with keep-offload): its UDP allocations, where its
// fast path is pinned, and which of the files sent along is which socket.
type savedState struct {
	Version     int                   `json:"version"` // stateVersion; another is not taken
	PinDir      string                `json:"pin_dir,omitempty"`
	Listeners   []savedListener       `json:"listeners,omitempty"`
	Allocations []savedAllocation     `json:"allocations"`
	Users       map[string]admin.User `json:"users,omitempty"` // what ended allocations relayed
}

// stateVersion numbers savedState's format.
const stateVersion = 1

// savedListener is a listening socket; UDP ones in the order of pion's
// PacketConnConfigs (an allocation belongs to one of them).
type savedListener struct {
	Scheme  string         `json:"scheme"`
	Addr    netip.AddrPort `json:"addr"`
	Ordinal int            `json:"ordinal"` // among the SO_REUSEPORT sockets of Addr
	File    int            `json:"file"`    // index of its descriptor, -1: none (bind again)
}

type savedAllocation struct {
	Listener    int            `json:"listener"` // index into the UDP listeners
	Client      netip.AddrPort `json:"client"`
	Relay       netip.AddrPort `json:"relay"`      // on the wire
	Advertised  netip.AddrPort `json:"advertised"` // as the client knows it
	File        int            `json:"file"`       // the relay socket's descriptor, -1: none
	User        string         `json:"user"`
	Realm       string         `json:"realm"`
	Family      uint8          `json:"family"`
	Expires     time.Time      `json:"expires"`
	Permissions []savedPeer    `json:"permissions,omitempty"`
	Channels    []savedChannel `json:"channels,omitempty"`
	Slow        admin.Flow     `json:"slow"`         // what user space relayed for it
	RetiredFast admin.Flow     `json:"retired_fast"` // what its removed channels relayed
}

type savedPeer struct {
	Addr    netip.AddrPort `json:"addr"`
	Expires time.Time      `json:"expires"`
}

type savedChannel struct {
	Number  uint16         `json:"number"`
	Peer    netip.AddrPort `json:"peer"`
	Expires time.Time      `json:"expires"`
}

// udpSocket is one of pion's PacketConnConfigs: which listener it serves.
type udpSocket struct {
	listener Listener
	ordinal  int
	conn     *net.UDPConn // nil for AF_XDP listeners, which are not handed over
}

// tcpSocket is a tcp:// or tls:// listening socket.
type tcpSocket struct {
	listener Listener
	ln       *net.TCPListener
}

// snapshot records the allocations pion holds (its readers must be held)
// and, withFiles, duplicates the sockets for a successor.
func (srv *Server) snapshot(withFiles bool) (savedState, []*os.File, error) {
	st := savedState{Version: stateVersion, PinDir: srv.pinDir(), Users: srv.gen.users.snapshot(nil)}
	var files []*os.File
	addFile := func(f interface{ File() (*os.File, error) }) (int, error) {
		if !withFiles {
			return -1, nil
		}
		dup, err := f.File()
		if err != nil {
			return -1, err
		}
		files = append(files, dup)
		return len(files) - 1, nil
	}
	fail := func(err error) (savedState, []*os.File, error) {
		closeFiles(files)
		return savedState{}, nil, fmt.Errorf("hand-over: %w", err)
	}
	for _, u := range srv.udpSockets {
		if u.conn == nil {
			return fail(errors.New("AF_XDP listeners (rx afxdp) cannot be handed over"))
		}
		idx, err := addFile(u.conn)
		if err != nil {
			return fail(err)
		}
		st.Listeners = append(st.Listeners, savedListener{Scheme: "udp", Addr: u.listener.Addr, Ordinal: u.ordinal, File: idx})
	}
	for _, t := range srv.tcpSockets {
		idx, err := addFile(t.ln)
		if err != nil {
			return fail(err)
		}
		st.Listeners = append(st.Listeners, savedListener{Scheme: t.listener.Scheme, Addr: t.listener.Addr, File: idx})
	}
	for _, a := range srv.turn.ExportAllocations() {
		rc, ok := a.RelayConn.(*relayConn)
		if !ok {
			continue
		}
		conn, ok := rc.PacketConn.(*net.UDPConn)
		if !ok {
			return fail(errors.New("relay socket is not a UDP socket"))
		}
		idx, err := addFile(conn)
		if err != nil {
			return fail(err)
		}
		saved := saveAllocation(a, rc.addr, idx)
		saved.Slow, saved.RetiredFast = rc.traffic.slowFlow(), rc.traffic.fastRetired()
		st.Allocations = append(st.Allocations, saved)
	}
	return st, files, nil
}

func saveAllocation(a turn.AllocationState, wire netip.AddrPort, file int) savedAllocation {
	out := savedAllocation{
		Listener: a.PacketConnConfig, Client: addrPort(a.ClientAddr), Relay: wire, Advertised: addrPort(a.RelayAddr),
		File: file, User: a.Username, Realm: a.Realm, Family: byte(a.AddressFamily), Expires: a.Expires,
	}
	for _, p := range a.Permissions {
		out.Permissions = append(out.Permissions, savedPeer{Addr: addrPort(p.Addr), Expires: p.Expires})
	}
	for _, c := range a.Channels {
		out.Channels = append(out.Channels, savedChannel{Number: c.Number, Peer: addrPort(c.Peer), Expires: c.Expires})
	}
	return out
}

// importAllocations gives pion the saved allocations on their relay
// sockets: the files sent along, or sockets bound again at the same
// addresses (after a stop, the ports are free). An allocation that cannot
// be restored is logged and left out; its client allocates again.
func (srv *Server) importAllocations(st savedState, files []*os.File) int {
	imported := 0
	for _, a := range st.Allocations {
		if err := srv.importAllocation(st, a, files); err != nil {
			srv.log.Warnf("allocation of %v (relay %v) not taken over: %v", a.Client, a.Relay, err)
			continue
		}
		imported++
	}
	return imported
}

func (srv *Server) importAllocation(st savedState, a savedAllocation, files []*os.File) error {
	if a.Listener < 0 || a.Listener >= len(st.Listeners) {
		return fmt.Errorf("no listener %d", a.Listener)
	}
	index := srv.udpSocketIndex(st.Listeners[a.Listener])
	if index < 0 {
		return fmt.Errorf("listener %v is no longer configured", st.Listeners[a.Listener].Addr)
	}
	conn, err := srv.relaySocket(a, files)
	if err != nil {
		return err
	}
	rc := srv.gen.newRelayConn(conn, a.Relay, a.User)
	rc.traffic.restore(a.Slow, a.RetiredFast)
	state := turn.AllocationState{
		PacketConnConfig: index, ClientAddr: net.UDPAddrFromAddrPort(a.Client),
		ServerAddr: srv.udpSockets[index].localAddr(), RelayAddr: net.UDPAddrFromAddrPort(a.Advertised),
		RelayConn: rc, Username: a.User, Realm: a.Realm, AddressFamily: turn.RequestedAddressFamily(a.Family),
		Expires: a.Expires,
	}
	for _, p := range a.Permissions {
		state.Permissions = append(state.Permissions, turn.PermissionState{Addr: net.UDPAddrFromAddrPort(p.Addr), Expires: p.Expires})
	}
	for _, c := range a.Channels {
		state.Channels = append(state.Channels, turn.ChannelBindState{Number: c.Number, Peer: net.UDPAddrFromAddrPort(c.Peer), Expires: c.Expires})
	}
	if err := srv.turn.ImportAllocation(state); err != nil {
		rc.Close()
		return err
	}
	return nil
}

// relaySocket is the allocation's relay socket: the one sent along, or a
// new one bound at its address.
func (srv *Server) relaySocket(a savedAllocation, files []*os.File) (net.PacketConn, error) {
	if a.File >= 0 && a.File < len(files) {
		if !srv.gen.live.reserve(a.Relay, false) {
			return nil, fmt.Errorf("relay address %v taken twice", a.Relay)
		}
		conn, err := net.FilePacketConn(files[a.File])
		if err == nil {
			err = srv.checkSocket(conn, a.Relay)
		}
		if err == nil {
			err = srv.attachGuard(conn)
		}
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			srv.gen.live.remove(a.Relay, false)
			return nil, err
		}
		return conn, nil
	}
	network := "udp4"
	if a.Relay.Addr().Is6() {
		network = "udp6"
	}
	var conn net.PacketConn
	_, err := srv.gen.bindRelay(a.Relay.Addr(), int(a.Relay.Port()), false, func(addr string) (err error) {
		conn, err = srv.gen.listenPacket(network, addr)
		return err
	})
	return conn, err
}

// udpSocketIndex finds the PacketConnConfig serving a saved UDP listener.
func (srv *Server) udpSocketIndex(l savedListener) int {
	for i, u := range srv.udpSockets {
		if u.listener.Addr == l.Addr && u.ordinal == l.Ordinal {
			return i
		}
	}
	return -1
}

func (u udpSocket) localAddr() net.Addr {
	if u.conn != nil {
		return u.conn.LocalAddr()
	}
	return net.UDPAddrFromAddrPort(u.listener.Addr)
}

// inheritedFile takes the saved listener's file for l (and its ordinal),
// if the predecessor sent one.
func (srv *Server) inheritedFile(l Listener, scheme string, ordinal int) *os.File {
	if srv.inherited == nil {
		return nil
	}
	for _, s := range srv.inherited.state.Listeners {
		if s.Scheme == scheme && s.Addr == l.Addr && s.Ordinal == ordinal && s.File >= 0 && s.File < len(srv.inherited.files) {
			return srv.inherited.files[s.File]
		}
	}
	return nil
}

// savedUDPCount is how many sockets the predecessor had on a UDP
// listener: an allocation stays with its socket's index, and SO_REUSEPORT
// sends a client to the same index only in a group of the same size.
func (srv *Server) savedUDPCount(l Listener) int {
	if srv.inherited == nil {
		return 0
	}
	n := 0
	for _, s := range srv.inherited.state.Listeners {
		if s.Scheme == "udp" && s.Addr == l.Addr {
			n++
		}
	}
	return n
}

// writeStateFile saves the state for the next start, readable by root only.
func writeStateFile(path string, st savedState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readStateFile reads the state a kept stop left (removed once taken over:
// it is used once). No file: no state.
func readStateFile(path string) (*savedState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s: state version %d, this server reads %d", path, st.Version, stateVersion)
	}
	return &st, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// checkSocket makes sure a socket sent along is bound where the state says:
// descriptors matched by index must not be taken for another's.
func (srv *Server) checkSocket(conn net.PacketConn, want netip.AddrPort) error {
	if got := addrPort(conn.LocalAddr()); got != want {
		return fmt.Errorf("socket sent for %v is bound at %v", want, got)
	}
	return nil
}
