package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The rate tests' participants (internal/sfu's shaped, simulcast and
// rate-adaptation meetings): participants.mjs runs meeting pages, each
// publishing and receiving, and prints every page's WebRTC stats once an
// interval as a JSON line (SampleLine), then a summary when told to stop.
// The tests cut the samples into their phases and judge them.

// PageSample is one participant's stats at one moment (participants.mjs).
type PageSample struct {
	T        int64 `json:"t"` // ms since the epoch (the line's)
	Role     string
	ID       string
	Status   string
	Inbound  map[string]InboundStreams // by publisher id
	Outbound map[string]OutStats       // by kind
	Pub      ConnStats                 // the send-only connection's candidate pair
	Paused   map[string]bool           // publisher id -> the SFU paused its video to this page
}

// InboundStreams is a page's receive side of one publisher: its video,
// audio and connection.
type InboundStreams struct {
	Video, Audio InStats
	Conn         ConnStats
}

// InStats is an inbound-rtp stream's counters (the names are WebRTC's).
type InStats struct {
	PacketsReceived, PacketsLost, BytesReceived, FramesDecoded, FramesDropped, KeyFramesDecoded float64
	FramesPerSecond, FreezeCount, TotalFreezesDuration, NackCount, PliCount, FirCount           float64
	PauseCount, TotalPausesDuration                                                             float64
	JitterBufferDelay, JitterBufferEmittedCount, FrameWidth                                     float64
	Codec                                                                                       string
}

// OutStats is an outbound-rtp stream's counters (for a simulcast video,
// its widest encoding's), and what the far end reported of it.
type OutStats struct {
	PacketsSent, BytesSent, RetransmittedPacketsSent, FramesEncoded, KeyFramesEncoded float64
	FramesPerSecond, TargetBitrate, NackCount, PliCount, FrameWidth, SSRC, Encodings  float64
	TrackWidth                                                                        float64 // the camera track's, as opened
	QualityLimitationDurations                                                        map[string]float64
	ScalabilityMode, QualityLimitationReason, EncoderImplementation                   string
	EncodingWidths                                                                    string // a simulcast video's, "rid:width " each
	Remote                                                                            struct{ PacketsLost, FractionLost, RoundTripTime float64 }
}

// ConnStats is a connection's selected candidate pair.
type ConnStats struct {
	AvailableOutgoingBitrate, AvailableIncomingBitrate, CurrentRoundTripTime float64
}

// Negotiated is the rtcp-fb and extmap lines of a page's descriptions.
type Negotiated struct {
	PubAnswer []string
	Subs      map[string]struct{ Offer, Answer []string }
}

// Participants is one participants.mjs process and the lines it printed.
type Participants struct {
	Roles   string // the script's roles, as asked
	stdin   io.WriteCloser
	mu      sync.Mutex
	lines   []SampleLine
	sum     *SummaryLine
	errBuf  strings.Builder
	partial []byte
	done    chan struct{}
	exit    string // how the process ended (its wait status), once done
}

// SampleLine is one line of participants.mjs.
type SampleLine struct {
	T     int64
	Pages []PageSample
}

type SummaryLine struct {
	ElapsedMs  float64
	Samples    int
	Last       SampleLine
	Negotiated []Negotiated
}

// StartParticipants runs participants.mjs in ns with these roles (a page
// each: "send", "recv") for at most seconds, sampling every interval, its
// pages in browsers (BROWSERS: comma-separated per page, chromium by
// default); the test's end kills it.
func StartParticipants(t testing.TB, ctx context.Context, ns *netns.NS, url, roles string, seconds int, interval time.Duration, browsers string) *Participants {
	p := &Participants{Roles: roles, done: make(chan struct{})}
	cmd := BrowserScript{NS: ns, Script: "participants.mjs", Browsers: browsers,
		Args:   []string{url, roles, strconv.Itoa(seconds), strconv.Itoa(int(interval / time.Millisecond))},
		Stdout: (*lineWriter)(p), Stderr: (*errWriter)(p)}.Command(t, ctx)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	wait := testenv.StartGroup(t, cmd)
	go func() {
		err := wait()
		p.mu.Lock()
		p.exit = fmt.Sprintf("%v (%v)", err, cmd.ProcessState)
		p.mu.Unlock()
		close(p.done)
	}()
	return p
}

// Command sends the script a line of its commands (participants.mjs:
// "mode PAGE MODE" sets a page's scalability mode, "camera PAGE on|off"
// clicks its camera button, "stop").
func (p *Participants) Command(line string) {
	_, _ = io.WriteString(p.stdin, line+"\n")
}

// StopParticipants stops the processes at once (each page's participants leave
// when their process ends).
func StopParticipants(ps ...*Participants) {
	for _, p := range ps {
		_, _ = io.WriteString(p.stdin, "stop\n")
	}
	for _, p := range ps {
		p.Stop()
	}
}

// stop asks the script to end and print its summary, and waits (up to 30 s).
func (p *Participants) Stop() {
	_, _ = io.WriteString(p.stdin, "stop\n")
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// Exited says whether the process has ended.
func (p *Participants) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Snapshot is every sample line so far.
func (p *Participants) Snapshot() []SampleLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// Summary is the summary the script printed when stopped (nil: none yet).
func (p *Participants) Summary() *SummaryLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sum
}

// ExitState is how the process ended.
func (p *Participants) ExitState() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Stderr is the end of what the script printed to its standard error.
func (p *Participants) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.errBuf.String()
	if len(s) > 20000 {
		s = "..." + s[len(s)-20000:]
	}
	return s
}

// lineWriter parses participants.mjs's standard output line by line.
type lineWriter Participants

func (w *lineWriter) Write(b []byte) (int, error) {
	p := (*Participants)(w)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := slices.Index(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := p.partial[:i]
		p.partial = p.partial[i+1:]
		var s struct {
			SampleLine
			Summary *SummaryLine
		}
		if err := json.Unmarshal(line, &s); err != nil {
			fmt.Fprintf(&p.errBuf, "unparsed stdout line %q: %v\n", line, err)
			continue
		}
		if s.Summary != nil {
			p.sum = s.Summary
		} else {
			p.lines = append(p.lines, s.SampleLine)
		}
	}
}

type errWriter Participants

func (w *errWriter) Write(b []byte) (int, error) {
	p := (*Participants)(w)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errBuf.Len() < 1<<20 {
		p.errBuf.Write(b)
	}
	return len(b), nil
}
