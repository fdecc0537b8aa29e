package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/pion/rtcp"
)

// Router takes the RTCP a receiver sent: its leg's feedback (leg.Routes).
type Router interface {
	Feedback(from netip.AddrPort, pkts []rtcp.Packet) error
}

// Agent answers what reaches the SFU's media sockets besides replicated
// media: STUN connectivity checks (ICE) and receivers' RTCP, which goes to
// the leg it is about through the router. The data plane that reads the
// sockets hands it those datagrams (Handle as its upcall).
type Agent struct {
	ICE    *ICE
	router Router
}

// New is an agent answering checks for ice's sessions and routing RTCP
// through router.
func New(ice *ICE, router Router) (*Agent, error) {
	if ice == nil || router == nil {
		return nil, errors.New("agent: needs ICE and a router")
	}
	return &Agent{ICE: ice, router: router}, nil
}

// Handle takes one datagram that arrived on conn from `from`: a STUN
// request is answered on the same socket, RTCP is routed to its leg;
// anything else is not the agent's and is refused.
func (a *Agent) Handle(p []byte, from netip.AddrPort, conn *net.UDPConn) error {
	from = unmap(from)
	switch {
	case len(p) > 0 && p[0] <= 3:
		resp, err := a.ICE.Handle(p, from)
		if resp != nil {
			if _, werr := conn.WriteToUDPAddrPort(resp, from); werr != nil {
				return werr
			}
		}
		return err
	case len(p) > 1 && p[0] >= 128 && p[0] <= 191 && p[1] >= 192 && p[1] <= 223:
		pkts, err := rtcp.Unmarshal(p)
		if err != nil {
			return fmt.Errorf("agent: RTCP from %v: %w", from, err)
		}
		return a.router.Feedback(from, pkts)
	}
	return errors.New("agent: neither STUN nor RTCP")
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
