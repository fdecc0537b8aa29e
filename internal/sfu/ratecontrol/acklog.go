package ratecontrol

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// An ack log is the acks links take, as text, a line each:
//
//	ack NOW LINK LEG SEQ SENT ARRIVED SIZE RECEIVED
//
// (times in µs; LINK and LEG name the receiver and the sender), and lines
// of a test's own: "# ..." (comments) and "mark NOW TEXT". An operator
// looking into a receiver's rate control reads one; the tests replay one
// recorded from Chromium (ReadAckLog).

// AckLog writes an ack log; safe for concurrent use.
type AckLog struct {
	mu sync.Mutex
	w  io.Writer
}

// NewAckLog writes to w.
func NewAckLog(w io.Writer) *AckLog { return &AckLog{w: w} }

// Acks logs what a link's leg took at now.
func (l *AckLog) Acks(now time.Duration, link, leg string, acks []Ack) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range acks {
		fmt.Fprintf(l.w, "ack %d %s %s %d %d %d %d %t\n", now.Microseconds(), link, leg, a.Seq, a.Sent.Microseconds(),
			a.Arrived.Microseconds(), a.Size, a.Received)
	}
}

// Mark logs an event at now (a test's: "shaped 226000").
func (l *AckLog) Mark(now time.Duration, text string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "mark %d %s\n", now.Microseconds(), text)
}

// LoggedAcks is one ack line read back.
type LoggedAcks struct {
	Now       time.Duration
	Link, Leg string
	Ack       Ack
}

// Mark is one mark line read back.
type Mark struct {
	Now  time.Duration
	Text string
}

// ReadAckLog reads an ack log.
func ReadAckLog(r io.Reader) (acks []LoggedAcks, marks []Mark, err error) {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "mark "):
			var us int64
			var text string
			if _, err := fmt.Sscanf(line, "mark %d", &us); err != nil {
				return nil, nil, fmt.Errorf("ack log line %d: %v", n, err)
			}
			if _, rest, ok := strings.Cut(strings.TrimPrefix(line, "mark "), " "); ok {
				text = rest
			}
			marks = append(marks, Mark{Now: time.Duration(us) * time.Microsecond, Text: text})
		default:
			var l LoggedAcks
			var now, sent, arrived int64
			if _, err := fmt.Sscanf(line, "ack %d %s %s %d %d %d %d %t", &now, &l.Link, &l.Leg, &l.Ack.Seq, &sent, &arrived,
				&l.Ack.Size, &l.Ack.Received); err != nil {
				return nil, nil, fmt.Errorf("ack log line %d: %v", n, err)
			}
			l.Now, l.Ack.Sent, l.Ack.Arrived = time.Duration(now)*time.Microsecond, time.Duration(sent)*time.Microsecond,
				time.Duration(arrived)*time.Microsecond
			acks = append(acks, l)
		}
	}
	return acks, marks, sc.Err()
}
