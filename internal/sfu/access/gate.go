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

	mu       sync.Mutex
	used     map[string]int64 // token id -> its expiry (unix seconds)
	buckets  map[netip.Prefix]*bucket
	refusals map[Reason]uint64
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
	return &Gate{cfg: cfg, used: map[string]int64{}, buckets: map[netip.Prefix]*bucket{}, refusals: map[Reason]uint64{}}, nil
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
		if len(g.buckets) >= g.cfg.MaxTracked {
			return g.refuse(refused(Rate, "too many addresses joining at once"))
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

// pruneBuckets forgets addresses whose buckets have refilled.
func (g *Gate) pruneBuckets(now time.Time) {
	full := time.Duration(float64(g.cfg.JoinBurst) / g.cfg.JoinRate * float64(time.Second))
	for k, b := range g.buckets {
		if now.Sub(b.at) >= full {
			delete(g.buckets, k)
		}
	}
}

// Join checks a join into room with token (room may be empty: the
// token's) and returns what it grants, and a token for rejoining (a
// reload) with the same grant until the same expiry: each token joins
// once. Open rooms take a join without a token.
func (g *Gate) Join(token, room string, now time.Time) (Grant, string, error) {
	if token == "" {
		if !g.cfg.Open {
			return Grant{}, "", g.Count(refused(NoToken, "this server's rooms need a join token (?token= in the page's address)"))
		}
		gr := Grant{Room: room, Identity: "", Publish: true}
		if !roomName.MatchString(room) {
			return Grant{}, "", g.Count(refused(BadMessage, "room %q: 1 to 64 letters, digits, '-' or '_'", room))
		}
		return gr, "", nil
	}
	if g.cfg.Secret == nil {
		return Grant{}, "", g.Count(refused(Signature, "this server has no token secret: join without a token"))
	}
	c, err := parse(g.cfg.Secret, token, now)
	if err != nil {
		return Grant{}, "", g.Count(err)
	}
	if room != "" && room != c.Room {
		return Grant{}, "", g.Count(refused(WrongRoom, "the token is for another room"))
	}
	if err := g.use(c.ID, c.Expires, now); err != nil {
		return Grant{}, "", g.Count(err)
	}
	rejoin, err := mint(g.cfg.Secret, c.Grant, now, time.Unix(c.Expires, 0))
	if err != nil {
		rejoin = "" // it expires this second: nothing to rejoin with
	}
	return c.Grant, rejoin, nil
}

// use records a token id as joined until its expiry; a second use is a
// replay.
func (g *Gate) use(id string, expires int64, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.used[id]; ok {
		return refused(Replayed, "this token has joined once already (a reload rejoins with the token the join gave)")
	}
	if len(g.used) >= g.cfg.MaxTracked {
		for k, exp := range g.used {
			if now.Unix() >= exp {
				delete(g.used, k)
			}
		}
	}
	if len(g.used) >= g.cfg.MaxTracked {
		return refused(Busy, "too many live tokens joined; try again later")
	}
	g.used[id] = expires
	return nil
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
