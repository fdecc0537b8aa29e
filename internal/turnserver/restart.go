package turnserver

import (
	"fmt"
	"net"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/turnserver/restart"
)

// restartHost is the server as package restart reaches it: pion's
// allocations on their relay sockets, the channel table, the endpoints.
type restartHost struct{ srv *Server }

func (h restartHost) Engine() *offload.Engine { return h.srv.engine }

func (h restartHost) Export() ([]restart.Allocation, map[string]admin.User) {
	users := h.srv.gen.users.snapshot(nil)
	var out []restart.Allocation
	for _, a := range h.srv.turn.ExportAllocations() {
		rc, ok := a.RelayConn.(*relayConn)
		if !ok {
			continue
		}
		out = append(out, restart.Allocation{AllocationState: a, Conn: rc.PacketConn, Wire: rc.addr,
			Slow: rc.traffic.slowFlow(), RetiredFast: rc.traffic.fastRetired()})
	}
	return out, users
}

func (h restartHost) Import(a restart.Allocation) error {
	conn, err := h.relaySocket(a)
	if err != nil {
		return err
	}
	rc := h.srv.gen.newRelayConn(conn, a.Wire, a.Username)
	rc.traffic.restore(a.Slow, a.RetiredFast)
	a.RelayConn = rc
	if err := h.srv.turn.ImportAllocation(a.AllocationState); err != nil {
		rc.Close()
		return err
	}
	return nil
}

// relaySocket is an imported allocation's relay socket: the one sent
// along, or a new one bound at its address (after a stop, the port is free).
func (h restartHost) relaySocket(a restart.Allocation) (net.PacketConn, error) {
	gen := h.srv.gen
	if a.Conn != nil {
		if !gen.live.reserve(a.Wire, false) {
			a.Conn.Close()
			return nil, fmt.Errorf("relay address %v taken twice", a.Wire)
		}
		return a.Conn, nil
	}
	network := "udp4"
	if a.Wire.Addr().Is6() {
		network = "udp6"
	}
	var conn net.PacketConn
	_, err := gen.bindRelay(a.Wire.Addr(), int(a.Wire.Port()), false, func(addr string) (err error) {
		conn, err = gen.listenPacket(network, addr)
		return err
	})
	return conn, err
}

func (h restartHost) ImportUsers(users map[string]admin.User) { h.srv.gen.users.restore(users) }

func (h restartHost) RelayConns() []net.PacketConn { return h.srv.gen.live.conns() }

func (h restartHost) Installed() map[offload.Channel]bool { return h.srv.table.installed() }

func (h restartHost) DetachFastPath() {
	if h.srv.table != nil {
		h.srv.table.detachSink()
	}
}

func (h restartHost) AttachFastPath() {
	var sink channelSink = discardSink{}
	if h.srv.engine != nil {
		sink = h.srv.engine
	}
	h.srv.table.attachSink(sink)
}

func (h restartHost) StopEndpoints() {
	srv := h.srv
	if srv.metrics != nil {
		_ = srv.metrics.Close()
		srv.metrics = nil
	}
	if srv.admin != nil {
		_ = srv.admin.Close()
		srv.admin = nil
	}
}

func (h restartHost) StartEndpoints() {
	srv := h.srv
	if srv.metrics == nil && srv.settings.MetricsListen != "" {
		if err := srv.serveMetrics(); err != nil {
			srv.log.Warnf("metrics: %v", err)
		}
	}
	if srv.admin == nil {
		if err := srv.serveAdmin(); err != nil {
			srv.log.Warnf("%v", err)
		}
	}
}
