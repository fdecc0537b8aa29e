package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// Agent answers what reaches the SFU's media sockets besides replicated
// media: STUN connectivity checks (ICE) and receivers' RTCP (Feedback).
// With the eBPF data plane it reads the sockets itself (Serve); with the
// user-space one, that data plane hands it the same datagrams (Handle).
type Agent struct {
	ICE      *ICE
	Feedback *Feedback

	mu    sync.Mutex
	conns map[netip.AddrPort]*net.UDPConn // by local address: where replies and feedback leave
}

// New is an agent over the SFU's media sockets. Feedback leaves from the
// socket whose address is the path's Via.
func New(ice ICEConfig, fb FeedbackConfig, conns []*net.UDPConn) (*Agent, error) {
	a := &Agent{ICE: NewICE(ice), conns: map[netip.AddrPort]*net.UDPConn{}}
	for _, c := range conns {
		a.conns[unmap(c.LocalAddr().(*net.UDPAddr).AddrPort())] = c
	}
	fb.Send = a.sendVia
	var err error
	if a.Feedback, err = NewFeedback(fb); err != nil {
		return nil, err
	}
	return a, nil
}

// Send sends p from the SFU's socket at from to `to` (the data plane's
// padding packets).
func (a *Agent) Send(p []byte, from, to netip.AddrPort) error { return a.sendVia(p, to, from) }

func (a *Agent) sendVia(p []byte, to, via netip.AddrPort) error {
	a.mu.Lock()
	c := a.conns[unmap(via)]
	a.mu.Unlock()
	if c == nil {
		return fmt.Errorf("agent: no media socket at %v", via)
	}
	_, err := c.WriteToUDPAddrPort(p, to)
	return err
}

// Handle takes one datagram that arrived on conn from `from`: a STUN
// request is answered on the same socket, RTCP is routed to its sender;
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
		return a.Feedback.Handle(p, from)
	}
	return errors.New("agent: neither STUN nor RTCP")
}

// Serve reads conn until it is closed, handing every datagram to Handle;
// errors about single datagrams go to onError (nil: ignored).
func (a *Agent) Serve(conn *net.UDPConn, onError func(error)) error {
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if err := a.Handle(buf[:n], from, conn); err != nil && onError != nil {
			onError(err)
		}
	}
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
