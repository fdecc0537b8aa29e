package dataplane

import (
	"errors"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/ebrtc/ebrtc/internal/addrport"
)

// Encrypted media (the user plane): each browser connection's SRTP keys
// come from its DTLS handshake (package secure). A datagram's RTP or RTCP
// is opened once with the keys of the connection it came from; each
// replica, and every packet of the SFU's own (retransmissions, padding,
// feedback), is sealed with the keys of the connection it goes to. What
// comes from or goes to a connection without keys is dropped and counted
// (Unprotected), what fails authentication too (Unauthentic): no plain
// RTP ever leaves an encrypted plane.

// Protection is one connection's SRTP and SRTCP (secure.Transport): Open
// authenticates and decrypts, Seal encrypts and authenticates, each into
// dst's storage. Safe for concurrent use.
type Protection interface {
	Open(dst, p []byte) ([]byte, error)
	Seal(dst, p []byte) ([]byte, error)
	// Overhead is what Seal adds to an RTP packet (its tag).
	Overhead() int
}

// protections are the connections' keys by remote address, copied on
// write: a replica's lookup takes no lock (keys change per connection,
// lookups per replica).
type protections struct {
	mu sync.Mutex // writers
	by atomic.Pointer[map[netip.AddrPort]Protection]
}

func newProtections() *protections {
	k := &protections{}
	k.by.Store(&map[netip.AddrPort]Protection{})
	return k
}

func (k *protections) of(a netip.AddrPort) Protection { return (*k.by.Load())[a] }

// update replaces the map with a copy that change made.
func (k *protections) update(change func(map[netip.AddrPort]Protection)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	by := maps.Clone(*k.by.Load())
	change(by)
	k.by.Store(&by)
}

func (k *protections) set(a netip.AddrPort, p Protection) {
	k.update(func(by map[netip.AddrPort]Protection) { by[a] = p })
}

// drop takes a's keys away if they are p (another connection's, given
// the address since, stay).
func (k *protections) drop(a netip.AddrPort, p Protection) {
	k.update(func(by map[netip.AddrPort]Protection) {
		if by[a] == p {
			delete(by, a)
		}
	})
}

// errUnprotected: RTP or RTCP for a connection without keys.
var errUnprotected = errors.New("dataplane: no SRTP keys for the connection")

// seal is p sealed for the connection at `to`, in buf's storage; DTLS
// and STUN (not RTP or RTCP) go as they are.
func (k *protections) seal(buf, p []byte, to netip.AddrPort) ([]byte, error) {
	if !isRTPOrRTCP(p) {
		return p, nil
	}
	pr := k.of(to)
	if pr == nil {
		return nil, errUnprotected
	}
	return pr.Seal(buf, p)
}

// overhead is what sealing adds to an RTP packet for the connection at
// `to` (0 without keys, or on a plain plane): counted in its leg's sent
// sizes, as the link carries them.
func (k *protections) overhead(to netip.AddrPort) int {
	if k == nil {
		return 0
	}
	if p := k.of(to); p != nil {
		return p.Overhead()
	}
	return 0
}

// isRTPOrRTCP: version 2 in the first byte (RFC 7983: 128-191).
func isRTPOrRTCP(p []byte) bool { return len(p) > 0 && p[0] >= 128 && p[0] <= 191 }

// isDTLS: a DTLS record's content type (RFC 7983: 20-63).
func isDTLS(p []byte) bool { return len(p) > 0 && p[0] >= 20 && p[0] <= 63 }

// Protect makes the connection at remote's RTP and RTCP go through p from
// now on. Only an encrypted user plane takes keys.
func (u *User) Protect(remote netip.AddrPort, p Protection) error {
	if u.fwd.keys == nil {
		return errors.New("dataplane: the plane forwards plain RTP (not encrypted)")
	}
	if p == nil {
		return errors.New("dataplane: no keys given (Unprotect takes them away)")
	}
	u.fwd.keys.set(addrport.Unmap(remote), p)
	return nil
}

// Unprotect takes p away from remote, if they are still its keys: its
// media is dropped from then on.
func (u *User) Unprotect(remote netip.AddrPort, p Protection) {
	if u.fwd.keys != nil {
		u.fwd.keys.drop(addrport.Unmap(remote), p)
	}
}

// open is the plain packet of an encrypted plane's datagram (in b's
// scratch), or false when it is dropped or was the agent's (DTLS). STUN
// and anything else pass as they are, for Classify to judge.
func (u *User) open(c *mediaConn, p []byte, from netip.AddrPort, pr Protection, b *replicaBatch) ([]byte, bool) {
	switch {
	case isDTLS(p):
		u.count(DTLS, len(p))
		if u.cfg.Upcall != nil {
			u.cfg.Upcall(p, from, c.conn)
		}
		return nil, false
	case !isRTPOrRTCP(p):
		return p, true
	}
	if pr == nil {
		u.count(Unprotected, len(p))
		return nil, false
	}
	plain, err := pr.Open(b.plain[:0], p)
	if err != nil {
		u.count(Unauthentic, len(p))
		return nil, false
	}
	b.overhead = len(p) - len(plain)
	return plain, true
}

// sealReplicas seals each replica of b for its receiver, in b's sealing
// buffers; a replica whose receiver has no keys is left out (counted).
func (f *forwarder) sealReplicas(pi *packetInfo, b *replicaBatch) {
	kept := 0
	for k, m := range b.replicas {
		sealed, err := f.keys.seal(b.sealed[k][:0], m.Buf, m.Addr)
		if err != nil {
			f.count(Unprotected, pi.size)
			continue
		}
		b.sealed[k] = sealed[:0] // (a grown buffer is kept)
		m.Buf = sealed
		b.replicas[kept], b.to[kept] = m, b.to[k]
		kept++
	}
	b.replicas, b.to = b.replicas[:kept], b.to[:kept]
}
