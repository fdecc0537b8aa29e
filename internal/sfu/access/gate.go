package access

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reason is why a join was refused: the label of
// ebrtc_sfu_join_refusals_total.
type Reason string

// The reasons a join is refused.
const (
	NoToken     Reason = "no_token"      // rooms need a token and none came
	Malformed   Reason = "malformed"     // not a token, or a claim missing or out of range
	Signature   Reason = "signature"     // not signed with our secret (or not HS256)
	Expired     Reason = "expired"       // past its exp
	NotYetValid Reason = "not_yet_valid" // before its nbf
	Replayed    Reason = "replayed"      // its id already joined once
	WrongRoom   Reason = "wrong_room"    // the join names another room than the token
	Origin      Reason = "origin"        // a page of another site opened the WebSocket
	Rate        Reason = "rate"          // too many joins from one address
	Rooms       Reason = "rooms"         // as many rooms as --max-rooms
	RoomFull    Reason = "room_full"     // as many participants as --max-participants
	Busy        Reason = "busy"          // the used-token record is full of live tokens
	Idle        Reason = "idle"          // no join within JoinDeadline of connecting
	BadMessage  Reason = "message"       // a join that is not one
)

// Refusal is a refused join: the reason counted, and text for the client.
type Refusal struct {
	Reason Reason
	Text   string
}

func (r *Refusal) Error() string { return "join refused (" + string(r.Reason) + "): " + r.Text }

func refused(reason Reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Text: fmt.Sprintf(format, args...)}
}

// Refuse is a refusal for this reason, for the pieces that enforce limits
// the gate does not own (the controller's rooms).
func Refuse(reason Reason, format string, args ...any) error { return refused(reason, format, args...) }

// JoinDeadline is how long a signaling connection may stay without
// joining.
const JoinDeadline = 10 * time.Second

// Config of a gate.
type Config struct {
	// Secret signs join tokens (at least MinSecret bytes). Without one
	// the gate refuses to exist unless Open says so.
	Secret []byte
	// Open: anyone who reaches the page joins any room (without a token;
	// with a Secret, tokens still given are checked).
	Open bool
	// JoinRate and JoinBurst bound joins per source address (an IPv6
	// /64 counts as one): a token bucket, JoinRate a second (default 5)
	// and JoinBurst at once (default 20: an office behind one NAT
	// joining a meeting together).
	JoinRate  float64
	JoinBurst int
	// MaxTracked bounds the addresses and token ids remembered (default
	// 65,536 each): a flood past it is refused, never an unbounded map.
	MaxTracked int
}

// Gate admits joins.
type Gate struct {
	cfg Config

	mu        sync.Mutex
	used      map[string]usedToken // by token id
	buckets   map[netip.Prefix]*bucket
	lastPrune time.Time
	refusals  map[Reason]uint64
}

// usedToken is a token id that joined: until when to remember it, and
// the generation of its last join (0: the token itself, then its rejoin
// tokens').
type usedToken struct {
	expires    int64
	generation int
}

// Admission is a join the gate let through: what it grants, the token to
// rejoin with, and what Release needs to undo it.
type Admission struct {
	Grant  Grant
	Rejoin string // empty for open rooms' joins
	id     string
	before *usedToken // the id's record before this join (nil: none)
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New is a gate for cfg; a bad config is an error naming the flag.
func New(cfg Config) (*Gate, error) {
	switch {
	case cfg.Secret == nil && !cfg.Open:
		return nil, errors.New("token-secret: rooms need join tokens signed with a secret (--token-secret-file), or say --open-rooms to let anyone who reaches the page join any room")
	case cfg.Secret != nil && len(cfg.Secret) < MinSecret:
		return nil, fmt.Errorf("token-secret: %d bytes; want at least %d", len(cfg.Secret), MinSecret)
	case cfg.JoinRate < 0 || cfg.JoinBurst < 0 || cfg.MaxTracked < 0:
		return nil, errors.New("join-rate: want positive numbers")
	}
	if cfg.JoinRate == 0 {
		cfg.JoinRate = 5
	}
	if cfg.JoinBurst == 0 {
		cfg.JoinBurst = 20
	}
	if cfg.MaxTracked == 0 {
		cfg.MaxTracked = 1 << 16
	}
	return &Gate{cfg: cfg, used: map[string]usedToken{}, buckets: map[netip.Prefix]*bucket{}, refusals: map[Reason]uint64{}}, nil
}

// Tokens says whether joins carry tokens (a secret is set).
func (g *Gate) Tokens() bool { return g.cfg.Secret != nil }

// Admit takes one join from addr out of its address's bucket.
func (g *Gate) Admit(addr netip.Addr, now time.Time) error {
	key := sourcePrefix(addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.buckets[key]
	if b == nil {
		if len(g.buckets) >= g.cfg.MaxTracked {
			g.pruneBuckets(now)
		}
		b = &bucket{tokens: float64(g.cfg.JoinBurst), at: now}
		g.buckets[key] = b
	}
	b.tokens = min(float64(g.cfg.JoinBurst), b.tokens+now.Sub(b.at).Seconds()*g.cfg.JoinRate)
	b.at = now
	if b.tokens < 1 {
		return g.refuse(refused(Rate, "more than %g joins a second from %v", g.cfg.JoinRate, key))
	}
	b.tokens--
	return nil
}

// sourcePrefix is what one source is: an IPv4 address, or an IPv6 /64
// (what one host or site is given).
func sourcePrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// pruneBuckets makes room for one more address: it forgets those whose
// buckets have refilled (at most once a second: a walk of the whole map),
// and if none has, one at random. A newcomer is never refused for want of
// room, whoever filled it; the address forgotten starts again full.
func (g *Gate) pruneBuckets(now time.Time) {
	if now.Sub(g.lastPrune) >= time.Second {
		g.lastPrune = now
		full := time.Duration(float64(g.cfg.JoinBurst) / g.cfg.JoinRate * float64(time.Second))
		for k, b := range g.buckets {
			if now.Sub(b.at) >= full {
				delete(g.buckets, k)
			}
		}
	}
	for k := range g.buckets {
		if len(g.buckets) < g.cfg.MaxTracked {
			break
		}
		delete(g.buckets, k)
	}
}

// Join checks a join into room with token (room may be empty: the
// token's). A token joins once; the admission carries a token for the
// next join of the same grant until the same expiry (a reload), which
// joins once too. Open rooms take a join without a token. If the join
// then fails elsewhere (a full room), Release gives the token back.
func (g *Gate) Join(token, room string, now time.Time) (Admission, error) {
	if token == "" {
		if !g.cfg.Open {
			return Admission{}, g.Count(refused(NoToken, "this server's rooms need a join token (?token= in the page's address)"))
		}
		if !roomName.MatchString(room) {
			return Admission{}, g.Count(refused(BadMessage, "room %q: 1 to 64 letters, digits, '-' or '_'", room))
		}
		return Admission{Grant: Grant{Room: room, Publish: true}}, nil
	}
	if g.cfg.Secret == nil {
		return Admission{}, g.Count(refused(Signature, "this server has no token secret: join without a token"))
	}
	c, err := parse(g.cfg.Secret, token, now)
	if err != nil {
		return Admission{}, g.Count(err)
	}
	if room != "" && room != c.Room {
		return Admission{}, g.Count(refused(WrongRoom, "the token is for another room"))
	}
	a := Admission{Grant: c.Grant, id: c.ID}
	if a.before, err = g.use(c, now); err != nil {
		return Admission{}, g.Count(err)
	}
	next := c
	next.IssuedAt, next.NotBefore, next.Generation = now.Unix(), 0, c.Generation+1
	if a.Rejoin, err = mint(g.cfg.Secret, next); err != nil {
		a.Rejoin = "" // it expires this second: nothing to rejoin with
	}
	return a, nil
}

// use records the join of a token: its id is new, or the generation is
// the one after the last that joined. It returns the record before.
func (g *Gate) use(c claims, now time.Time) (*usedToken, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, ok := g.used[c.ID]; ok {
		if c.Generation != u.generation+1 {
			return nil, refused(Replayed, "this token has joined once already (each joins once: ask for a new one; a reload rejoins with the token the join gave)")
		}
		g.used[c.ID] = usedToken{expires: u.expires, generation: c.Generation}
		return &u, nil
	}
	if len(g.used) >= g.cfg.MaxTracked {
		for k, u := range g.used {
			if now.Unix() >= u.expires {
				delete(g.used, k)
			}
		}
	}
	if len(g.used) >= g.cfg.MaxTracked {
		return nil, refused(Busy, "too many live tokens joined; try again later")
	}
	// (An id unknown with a later generation: a rejoin after a restart,
	// which forgot what joined. It joins, and counts on from there.)
	g.used[c.ID] = usedToken{expires: c.Expires, generation: c.Generation}
	return nil, nil
}

// Release undoes an admission whose join failed after the gate (the
// room full, the server's rooms all taken): its token may join again.
func (g *Gate) Release(a Admission) {
	if a.id == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if a.before == nil {
		delete(g.used, a.id)
	} else {
		g.used[a.id] = *a.before
	}
}

// Count counts err's refusal (if it is one) and returns it.
func (g *Gate) Count(err error) error {
	var r *Refusal
	if errors.As(err, &r) {
		g.mu.Lock()
		g.refusals[r.Reason]++
		g.mu.Unlock()
	}
	return err
}

// refuse is Count with the lock held.
func (g *Gate) refuse(r *Refusal) error {
	g.refusals[r.Reason]++
	return r
}

// Refusals are the joins refused so far, by reason.
func (g *Gate) Refusals() map[Reason]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[Reason]uint64, len(g.refusals))
	for k, v := range g.refusals {
		out[k] = v
	}
	return out
}

var refusalsDesc = prometheus.NewDesc("ebrtc_sfu_join_refusals_total",
	"Joins refused (signaling connections and join messages), by reason: no_token, malformed, signature, expired, not_yet_valid, replayed, wrong_room, origin, rate, rooms, room_full, busy, idle, message.",
	[]string{"reason"}, nil)

// Describe and Collect make the gate a Prometheus collector.
func (g *Gate) Describe(ch chan<- *prometheus.Desc) { ch <- refusalsDesc }

// Collect emits the refusals by reason.
func (g *Gate) Collect(ch chan<- prometheus.Metric) {
	for r, n := range g.Refusals() {
		ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(n), string(r))
	}
}
