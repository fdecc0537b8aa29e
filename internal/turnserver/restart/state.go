package restart

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

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/admin"
)

// savedState is what a server hands its successor (Upgrade) or keeps for
// the next start (Stop with keep-offload): its UDP allocations, where its
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

// Allocation is one of pion's UDP allocations as the server exports and
// imports it: with its relay socket and what that socket relayed.
type Allocation struct {
	turn.AllocationState                // its RelayConn is the server's, nil to import
	Conn                 net.PacketConn // the relay socket (to import: nil, bind one again at Wire)
	Wire                 netip.AddrPort // the relay socket's address on the wire
	Slow                 admin.Flow     // what user space relayed for it
	RetiredFast          admin.Flow     // what its removed channels relayed
}

// snapshot records the allocations pion holds (its readers must be held)
// and, withFiles, duplicates the sockets for a successor.
func (l *Lifecycle) snapshot(withFiles bool) (savedState, []*os.File, error) {
	files := &fileList{dup: withFiles}
	allocs, users := l.host.Export()
	st := savedState{Version: stateVersion, PinDir: l.pinDir(), Users: users}
	var err error
	if st.Listeners, err = l.saveListeners(files); err == nil {
		st.Allocations, err = saveAllocations(allocs, files)
	}
	if err != nil {
		closeFiles(files.files)
		return savedState{}, nil, fmt.Errorf("hand-over: %w", err)
	}
	return st, files.files, nil
}

// fileList collects the descriptors a successor is sent (none for a state
// file: the next start binds again).
type fileList struct {
	dup   bool
	files []*os.File
}

// add duplicates f's descriptor and says its index (-1: none).
func (fl *fileList) add(f interface{ File() (*os.File, error) }) (int, error) {
	if !fl.dup {
		return -1, nil
	}
	dup, err := f.File()
	if err != nil {
		return -1, err
	}
	fl.files = append(fl.files, dup)
	return len(fl.files) - 1, nil
}

func (l *Lifecycle) saveListeners(files *fileList) ([]savedListener, error) {
	var out []savedListener
	for _, u := range l.udp {
		if u.conn == nil {
			return nil, errors.New("AF_XDP listeners (rx afxdp) cannot be handed over")
		}
		idx, err := files.add(u.conn)
		if err != nil {
			return nil, err
		}
		out = append(out, savedListener{Scheme: "udp", Addr: u.addr, Ordinal: u.ordinal, File: idx})
	}
	for _, t := range l.tcp {
		idx, err := files.add(t.ln)
		if err != nil {
			return nil, err
		}
		out = append(out, savedListener{Scheme: t.scheme, Addr: t.addr, File: idx})
	}
	return out, nil
}

func saveAllocations(allocs []Allocation, files *fileList) ([]savedAllocation, error) {
	var out []savedAllocation
	for _, a := range allocs {
		conn, ok := a.Conn.(*net.UDPConn)
		if !ok {
			return nil, errors.New("relay socket is not a UDP socket")
		}
		idx, err := files.add(conn)
		if err != nil {
			return nil, err
		}
		out = append(out, save(a, idx))
	}
	return out, nil
}

func save(a Allocation, file int) savedAllocation {
	out := savedAllocation{
		Listener: a.PacketConnConfig, Client: addrPort(a.ClientAddr), Relay: a.Wire, Advertised: addrPort(a.RelayAddr),
		File: file, User: a.Username, Realm: a.Realm, Family: byte(a.AddressFamily), Expires: a.Expires,
		Slow: a.Slow, RetiredFast: a.RetiredFast,
	}
	for _, p := range a.Permissions {
		out.Permissions = append(out.Permissions, savedPeer{Addr: addrPort(p.Addr), Expires: p.Expires})
	}
	for _, c := range a.Channels {
		out.Channels = append(out.Channels, savedChannel{Number: c.Number, Peer: addrPort(c.Peer), Expires: c.Expires})
	}
	return out
}

// addrPort is an address pion exported as the state keeps it (unmapped).
func addrPort(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return addrport.Unmap(u.AddrPort())
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}
	}
	return addrport.Unmap(ap)
}

// importAllocations gives pion the saved allocations on their relay
// sockets: the files sent along, or sockets bound again at the same
// addresses (after a stop, the ports are free). An allocation that cannot
// be restored is logged and left out; its client allocates again.
func (l *Lifecycle) importAllocations(st savedState, files []*os.File) int {
	imported := 0
	for _, a := range st.Allocations {
		if err := l.importAllocation(st, a, files); err != nil {
			l.cfg.Log.Warnf("allocation of %v (relay %v) not taken over: %v", a.Client, a.Relay, err)
			continue
		}
		imported++
	}
	return imported
}

func (l *Lifecycle) importAllocation(st savedState, a savedAllocation, files []*os.File) error {
	if a.Listener < 0 || a.Listener >= len(st.Listeners) {
		return fmt.Errorf("no listener %d", a.Listener)
	}
	index := l.udpIndex(st.Listeners[a.Listener])
	if index < 0 {
		return fmt.Errorf("listener %v is no longer configured", st.Listeners[a.Listener].Addr)
	}
	var conn net.PacketConn
	if a.File >= 0 && a.File < len(files) {
		var err error
		if conn, err = l.adopt(files[a.File], a.Relay); err != nil {
			return err
		}
	}
	return l.host.Import(restored(a, index, l.udp[index].localAddr(), conn))
}

// restored is a saved allocation as pion imports it, at the index-th
// PacketConnConfig (whose address is server).
func restored(a savedAllocation, index int, server net.Addr, conn net.PacketConn) Allocation {
	state := turn.AllocationState{
		PacketConnConfig: index, ClientAddr: net.UDPAddrFromAddrPort(a.Client),
		ServerAddr: server, RelayAddr: net.UDPAddrFromAddrPort(a.Advertised),
		Username: a.User, Realm: a.Realm, AddressFamily: turn.RequestedAddressFamily(a.Family),
		Expires: a.Expires,
	}
	for _, p := range a.Permissions {
		state.Permissions = append(state.Permissions, turn.PermissionState{Addr: net.UDPAddrFromAddrPort(p.Addr), Expires: p.Expires})
	}
	for _, c := range a.Channels {
		state.Channels = append(state.Channels, turn.ChannelBindState{Number: c.Number, Peer: net.UDPAddrFromAddrPort(c.Peer), Expires: c.Expires})
	}
	return Allocation{AllocationState: state, Conn: conn, Wire: a.Relay, Slow: a.Slow, RetiredFast: a.RetiredFast}
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
