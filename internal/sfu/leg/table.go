package leg

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
	"github.com/ebrtc/ebrtc/internal/sfu/speakers"
)

// Config of a Table.
type Config struct {
	Plane  dataplane.Plane
	Routes *Routes
	// Adapt: each receiver's video follows its link (by default every
	// receiver gets every layer).
	Adapt bool
	// PLIInterval: at most one key frame request per sender and SSRC in
	// this long, however many receivers ask (default 500 ms).
	PLIInterval time.Duration
	Log         *slog.Logger
	// Now is CLOCK_MONOTONIC, the data plane's send log's clock (tests
	// set their own).
	Now func() time.Duration
	// AckLog, if set, gets every transport-wide ack the links take.
	AckLog *ratecontrol.AckLog
	// LastN, if set, gives each receiver video from its LastN most
	// recent speakers only (the others paused, audio always; with Adapt:
	// the data plane pauses video it adapts).
	LastN int
	// OnSpeaker, if set, is told of a room's new dominant speaker (its
	// stream's id). It must not call back into the table.
	OnSpeaker func(room, stream string)
}

// Table holds the senders, their legs and the receivers' links, and runs
// the rate control: a round every RoundInterval, the probes' padding paced
// every PaceInterval.
type Table struct {
	cfg Config

	mu      sync.Mutex
	senders map[netip.AddrPort]*Sender
	links   map[string]*link // by receiving participant
	rooms   map[string]*speakers.Ranking
	// speakerLeft: rooms whose dominant speaker closed since the last
	// round (told then: OnSpeaker with "").
	speakerLeft map[string]bool
	rounds      int
}

// Rate control timing.
const (
	RoundInterval = 250 * time.Millisecond
	PaceInterval  = 5 * time.Millisecond
)

// NewTable is a table without senders.
func NewTable(cfg Config) (*Table, error) {
	if cfg.Plane == nil || cfg.Routes == nil {
		return nil, errors.New("leg: a table needs a data plane and routes")
	}
	if cfg.PLIInterval == 0 {
		cfg.PLIInterval = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = dataplane.MonoNow
	}
	return &Table{cfg: cfg, senders: map[netip.AddrPort]*Sender{}, links: map[string]*link{}, rooms: map[string]*speakers.Ranking{},
		speakerLeft: map[string]bool{}}, nil
}

// Run runs the rounds and the pacing until ctx ends.
func (t *Table) Run(ctx context.Context) {
	rounds, pace := time.NewTicker(RoundInterval), time.NewTicker(PaceInterval)
	defer rounds.Stop()
	defer pace.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds.C:
			t.Round()
		case <-pace.C:
			t.Pace()
		}
	}
}

// Round is one round of rate control: each sender's layer rates, each
// link's targets and probes, then what each sender is asked.
func (t *Table) Round() {
	now := t.cfg.Now()
	t.mu.Lock()
	senders := slices.Collect(maps.Values(t.senders))
	links := slices.Collect(maps.Values(t.links))
	t.rounds++
	keyFrames := t.rounds%4 == 0 // every second: receivers still waiting for a key frame
	t.mu.Unlock()
	for _, s := range senders {
		s.observe(now)
		s.observeLevels()
	}
	t.rankSpeakers(now, senders)
	if t.cfg.Adapt {
		for _, l := range links {
			l.round(now)
		}
	}
	for _, s := range senders {
		s.afterRound(now, keyFrames)
	}
}

// Pace sends what the links' probes owe, and senders their transport-cc
// feedback when due.
func (t *Table) Pace() {
	now := t.cfg.Now()
	t.mu.Lock()
	links := slices.Collect(maps.Values(t.links))
	senders := slices.Collect(maps.Values(t.senders))
	t.mu.Unlock()
	for _, l := range links {
		l.pace(now)
	}
	for _, s := range senders {
		s.transportFeedback(now)
	}
}

// linkOf is the receiver's link, made if it has none.
func (t *Table) linkOf(receiver string) *link {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.links[receiver]
	if l == nil {
		l = newLink(t, receiver)
		t.links[receiver] = l
	}
	return l
}

// dropLink forgets a link without legs.
func (t *Table) dropLink(l *link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.links[l.receiver] == l && l.empty() {
		delete(t.links, l.receiver)
	}
}

// Status is every leg's state, for metrics and ebrtc top.
func (t *Table) Status() []LegStatus {
	t.mu.Lock()
	senders := slices.Collect(maps.Values(t.senders))
	t.mu.Unlock()
	var out []LegStatus
	for _, s := range senders {
		out = append(out, s.status()...)
	}
	slices.SortFunc(out, func(a, b LegStatus) int {
		if a.Sender != b.Sender {
			return compare(a.Sender, b.Sender)
		}
		return compare(a.Receiver, b.Receiver)
	})
	return out
}

// Senders is what each sender's stream carries.
func (t *Table) Senders() []SenderStatus {
	t.mu.Lock()
	senders := slices.Collect(maps.Values(t.senders))
	t.mu.Unlock()
	out := make([]SenderStatus, 0, len(senders))
	for _, s := range senders {
		out = append(out, s.senderStatus())
	}
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
