package controller

import (
	"errors"
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

// Security is the controller's side of encrypted media: every connection
// gets a DTLS-SRTP transport expecting the certificate its browser's
// description named, and its media flows only once the handshake gave
// keys, which then go to the data plane for the connection's address.
type Security struct {
	Identity   *secure.Identity
	Transports *secure.Transports // the agent hands them DTLS
	// Protect gives the connection at remote its keys, Unprotect takes
	// them away if they are still its (dataplane.User's).
	Protect   func(remote netip.AddrPort, p dataplane.Protection) error
	Unprotect func(remote netip.AddrPort, p dataplane.Protection)
	// Send sends a DTLS datagram from a media socket (Plane.Send).
	Send func(p []byte, from, to netip.AddrPort) error
	// Failed, if set, hears of a handshake that failed (logs, counts).
	Failed func(room, participant string, err error)
}

var errNoFamily = errors.New("controller: no media address of the destination's family")

func (c *Controller) encrypted() bool { return c.cfg.Security != nil }

// usable says whether cn's media may flow: bound by a check and, with
// encrypted media, keyed.
func (c *Controller) usable(cn *conn) bool {
	return cn.addr.IsValid() && (!c.encrypted() || cn.tr != nil && cn.tr.Ready())
}

// secure gives cn a transport expecting the certificate sec names.
func (c *Controller) secure(cn *conn, sec signaling.Security) error {
	if !c.encrypted() {
		return nil
	}
	s := c.cfg.Security
	tr, err := s.Identity.NewTransport(secure.TransportConfig{Fingerprints: sec.Fingerprints, Client: sec.SFUIsClient(),
		Send: func(p []byte, to netip.AddrPort) error {
			via, ok := c.mediaFor(to)
			if !ok {
				return errNoFamily
			}
			return s.Send(p, via, to)
		},
		Done: func(err error) { c.onSecured(cn, err) }})
	if err != nil {
		return err
	}
	cn.tr = tr
	s.Transports.Add(cn.ice.LocalUfrag, tr)
	return nil
}

// onSecured: cn's handshake ended; with keys, its media may flow.
func (c *Controller) onSecured(cn *conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn.dropped {
		return
	}
	if err != nil {
		if f := c.cfg.Security.Failed; f != nil {
			f(cn.owner.room.name, cn.owner.ID, err)
		}
		return
	}
	c.bound(cn)
}

// protect gives cn's address its keys (and takes them from an address it
// left); unprotect takes them away.
func (c *Controller) protect(cn *conn) {
	if !c.encrypted() || cn.protected == cn.addr {
		return
	}
	c.unprotect(cn)
	if c.usable(cn) && c.cfg.Security.Protect(cn.addr, cn.tr) == nil {
		cn.protected = cn.addr
	}
}

func (c *Controller) unprotect(cn *conn) {
	if c.encrypted() && cn.protected.IsValid() {
		c.cfg.Security.Unprotect(cn.protected, cn.tr)
		cn.protected = netip.AddrPort{}
	}
}

// dropSecurity closes cn's transport: its keys are gone.
func (c *Controller) dropSecurity(cn *conn) {
	if !c.encrypted() {
		return
	}
	c.unprotect(cn)
	c.cfg.Security.Transports.Remove(cn.ice.LocalUfrag)
}
