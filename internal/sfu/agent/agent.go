package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/pion/rtcp"

	"github.com/ebrtc/ebrtc/internal/addrport"
)

// Router takes the RTCP a receiver sent: its leg's feedback (leg.Routes).
type Router interface {
	Feedback(from netip.AddrPort, pkts []rtcp.Packet) error
}

// DTLS takes the DTLS records of encrypted media's handshakes
// (secure.Transports).
type DTLS interface {
	Handle(p []byte, from netip.AddrPort) error
}

// Agent answers what reaches the SFU's media sockets besides replicated
// media: STUN connectivity checks (ICE), receivers' RTCP, which goes to
// the leg it is about through the router, and with encrypted media the
// DTLS handshakes. The data plane that reads the sockets hands it those
// datagrams (Handle as its upcall).
type Agent struct {
	ICE    *ICE
	router Router
	dtls   DTLS
}

// New is an agent answering checks for ice's sessions, routing RTCP
// through router, and handing DTLS to dtls (nil: plain RTP, DTLS refused).
func New(ice *ICE, router Router, dtls DTLS) (*Agent, error) {
	if ice == nil || router == nil {
		return nil, errors.New("agent: needs ICE and a router")
	}
	return &Agent{ICE: ice, router: router, dtls: dtls}, nil
}

// Handle takes one datagram that arrived on conn from `from`: a STUN
// request is answered on the same socket, RTCP is routed to its leg, DTLS
// goes to its handshake; anything else is not the agent's and is refused.
func (a *Agent) Handle(p []byte, from netip.AddrPort, conn *net.UDPConn) error {
	from = addrport.Unmap(from)
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
	case a.dtls != nil && len(p) > 0 && p[0] >= 20 && p[0] <= 63:
		return a.dtls.Handle(p, from)
	}
	return errors.New("agent: neither STUN, RTCP nor DTLS of a handshake")
}
