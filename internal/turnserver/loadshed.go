package turnserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/hostaddr"
	"github.com/ebrtc/ebrtc/internal/metrics"
)

// Load shedding across a fleet. Servers sharing one auth-secret accept each
// other's TURN REST credentials, so a client can allocate on any of them.
// Once a server holds shed-above-allocations allocations, it answers a new
// Allocate with 300 Try Alternate and ALTERNATE-SERVER (RFC 8656 section
// 7.2, RFC 8489 section 10): the client repeats it, with the same
// credentials, at the alternate. Only new allocations move: pion consults
// the handler for an authenticated Allocate that would create one, never
// for Refresh, CreatePermission or ChannelBind, nor for an Allocate with a
// RESERVATION-TOKEN (its port is reserved here).

// alternates are the servers to redirect to, at most one per family.
type alternates struct{ v4, v6 netip.AddrPort }

// forClient lists the alternates for a client at ip: the one of the
// client's family first (RFC 8489 section 10 requires it; none, and there
// is no redirect), then the other as a spare. A loopback alternate is
// offered to loopback clients only: any other client would reach its own host.
func (a alternates) forClient(ip netip.Addr) []net.Addr {
	same, other := a.v4, a.v6
	if ip.Is6() {
		same, other = a.v6, a.v4
	}
	reachable := func(alt netip.AddrPort) bool {
		return alt.IsValid() && (!alt.Addr().IsLoopback() || ip.IsLoopback())
	}
	if !reachable(same) {
		return nil
	}
	out := []net.Addr{net.UDPAddrFromAddrPort(same)}
	if reachable(other) {
		out = append(out, net.UDPAddrFromAddrPort(other))
	}
	return out
}

func (a alternates) empty() bool { return !a.v4.IsValid() && !a.v6.IsValid() }

// parseAlternates reads alternate-server values: IP:PORT, one per family.
func parseAlternates(values []string) (alternates, error) {
	var a alternates
	for _, v := range values {
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			return a, fmt.Errorf("%q is not IP:PORT", v)
		}
		ip := ap.Addr().Unmap()
		switch {
		case ap.Port() == 0:
			return a, fmt.Errorf("%q: port 0", v)
		case ip.IsUnspecified() || ip.IsMulticast() || ip.Zone() != "":
			return a, fmt.Errorf("%q: clients cannot be sent to %s", v, ap.Addr())
		}
		slot := &a.v4
		if ip.Is6() {
			slot = &a.v6
		}
		if slot.IsValid() {
			return a, fmt.Errorf("more than one %s address", map[bool]string{true: "IPv4", false: "IPv6"}[ip.Is4()])
		}
		*slot = netip.AddrPortFrom(ip, ap.Port())
	}
	return a, nil
}

// validateLoadShedding checks the fleet keys; Validate calls it once the
// listeners and external addresses are parsed.
func validateLoadShedding(c Config, s *Settings) error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
	if c.ShedAboveAllocations < 0 {
		return bad("shed-above-allocations", "must not be negative")
	}
	sets := []struct {
		key     string
		values  []string
		schemes []string
	}{
		{"alternate-server", c.AlternateServers, []string{"udp", "tcp"}},
		{"tls-alternate-server", c.TLSAlternateServers, []string{"tls", "dtls"}},
	}
	anyAlternate := false
	for _, set := range sets {
		alts, err := parseAlternates(set.values)
		if err != nil {
			return bad(set.key, "%v", err)
		}
		if alts.empty() {
			continue
		}
		anyAlternate = true
		if c.ShedAboveAllocations == 0 {
			return bad(set.key, "needs shed-above-allocations, the load above which clients are sent there")
		}
		if !slices.ContainsFunc(s.Listeners, func(l Listener) bool { return slices.Contains(set.schemes, l.Scheme) }) {
			return bad(set.key, "no %s listener to send clients from", set.schemes)
		}
		for _, alt := range []netip.AddrPort{alts.v4, alts.v6} {
			if alt.IsValid() && isOwnAddress(alt, s) {
				return bad(set.key, "%s is this server's own listener: clients would come back", alt)
			}
		}
	}
	switch {
	case c.ShedAboveAllocations > 0 && !anyAlternate:
		return bad("shed-above-allocations", "needs alternate-server or tls-alternate-server, where clients are sent")
	case c.TotalQuota > 0 && c.ShedAboveAllocations >= c.TotalQuota:
		return bad("shed-above-allocations", "%d is not below total-quota %d: the quota would refuse before the server sheds",
			c.ShedAboveAllocations, c.TotalQuota)
	}
	return nil
}

// isOwnAddress reports whether alt is where one of this server's listeners
// is reached: its own address, or the port of a wildcard listener on an
// address of this host (loopback, relay-ip, external-ip or an interface's).
func isOwnAddress(alt netip.AddrPort, s *Settings) bool {
	var host *hostaddr.Set // read once, if a wildcard listener needs it
	for _, l := range s.Listeners {
		switch {
		case l.Addr == alt:
			return true
		case l.Addr.Port() != alt.Port() || !l.Addr.Addr().IsUnspecified() || l.Addr.Addr().Is4() != alt.Addr().Is4():
			continue
		case alt.Addr().IsLoopback() || slices.Contains(s.RelayIPs, alt.Addr()) || slices.Contains(s.ExternalIPs, alt.Addr()):
			return true
		}
		if host == nil {
			var err error
			if host, err = hostaddr.Read(); err != nil {
				continue // cannot tell; the other checks still hold
			}
		}
		if host.Contains(alt.Addr()) {
			return true
		}
	}
	return false
}

// loadShedder decides, for each Allocate pion is about to grant, whether
// it goes to an alternate server instead.
type loadShedder struct {
	threshold     int
	plain, secure alternates // for udp/tcp clients, for tls/dtls clients
	listeners     []Listener
	load          func() int
	events        *metrics.Events
	log           logging.LeveledLogger
}

// alternateHandler is pion's AlternateServerHandler, nil when the server
// does not shed load.
func (srv *Server) alternateHandler() turn.AlternateServerHandler {
	s := srv.settings
	if s.ShedAboveAllocations == 0 {
		return nil
	}
	plain, _ := parseAlternates(s.AlternateServers) // checked by Validate
	secure, _ := parseAlternates(s.TLSAlternateServers)
	l := &loadShedder{
		threshold: s.ShedAboveAllocations, plain: plain, secure: secure, listeners: s.Listeners,
		load: srv.allocs.load, events: srv.events, log: srv.log,
	}
	return l.redirect
}

func (l *loadShedder) redirect(user, _ string, src, dst net.Addr) []net.Addr {
	load := l.load()
	if load < l.threshold {
		return nil
	}
	alts := l.plain
	if l.secureListener(dst) {
		alts = l.secure
	}
	out := alts.forClient(addrPort(src).Addr())
	if len(out) > 0 {
		l.events.Redirects.Inc()
		l.log.Debugf("allocate of %s from %v sent to %v: %d allocations held", user, src, out[0], load)
	}
	return out
}

// secureListener reports whether dst, the server address an Allocate came
// to, is a tls or dtls listener. A TCP address belongs to a tcp or tls
// listener, a UDP one to a udp or dtls listener; one port serves one of each.
func (l *loadShedder) secureListener(dst net.Addr) bool {
	ap := addrPort(dst)
	_, stream := dst.(*net.TCPAddr)
	for _, ln := range l.listeners {
		if ln.Addr.Port() != ap.Port() || (!ln.Addr.Addr().IsUnspecified() && ln.Addr.Addr() != ap.Addr()) {
			continue
		}
		if (ln.Scheme == "tcp" || ln.Scheme == "tls") == stream {
			return ln.Scheme == "tls" || ln.Scheme == "dtls"
		}
	}
	return false
}

// fleetNonceKey keys the server's nonces with what a fleet shares, its
// credentials: servers with the same auth-secret (or, without one, the same
// realm and users) accept each other's nonces. libwebrtc repeats a
// redirected Allocate at the alternate with the nonce it holds, and gives
// up on a 438 Stale Nonce there.
func fleetNonceKey(s *Settings) []byte {
	material := "secret\x00" + s.AuthSecret
	if s.AuthSecret == "" {
		users := slices.Clone(s.Config.Users)
		slices.Sort(users)
		material = "users\x00" + s.Realm + "\x00" + strings.Join(users, "\x00")
	}
	mac := hmac.New(sha256.New, []byte(material))
	mac.Write([]byte("ebrtc turn nonce key"))
	return mac.Sum(nil)
}

// load is how many allocations the server holds, counting those the quota
// granted that pion is still creating.
func (c *allocationCounter) load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireReservations()
	return c.total + len(c.pending)
}
