package ratecontrol

import (
	"compress/gzip"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// recordedShaping is an ack log of TestShapedReceiver's P3 (Chromium 156,
// the eBPF data plane), from 5 s before its link was shaped to tbf
// (burst 8kb, latency 200ms) until 5 s after the shaper lifted:
//
//	EBRTC_SFU_ACK_LOG=/tmp/acks go test ./internal/sfu -run 'TestShapedReceiver/AV1-45%-user'
//	go run ./internal/sfu/ratecontrol/testdata/trim /tmp/acks | gzip > testdata/chromium-shaped.acklog.gz
const recordedShaping = "testdata/chromium-shaped.acklog.gz"

// The estimator on Chromium's own feedback, replayed as it came (both of
// P3's legs, merged as a link merges them): within 1.5 s of the shaping
// it is at or under the shaper's rate, and while shaped it stays between
// half of it and 10% over (what the data plane sent then was the SFU's
// choice in that run; the estimate is what the feedback says of it).
func TestEstimateOnRecordedFeedback(t *testing.T) {
	f, err := os.Open(recordedShaping)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	acks, marks, err := ReadAckLog(z)
	if err != nil {
		t.Fatal(err)
	}
	var shapedAt, liftedAt time.Duration
	var rate float64
	var receiver string
	for _, m := range marks {
		switch {
		case strings.HasPrefix(m.Text, "shaped "):
			shapedAt = m.Now
			if _, err := fmt.Sscanf(m.Text, "shaped %f %s", &rate, &receiver); err != nil {
				t.Fatal(err)
			}
		case m.Text == "lifted" && liftedAt == 0:
			liftedAt = m.Now
		}
	}
	if rate == 0 || liftedAt <= shapedAt {
		t.Fatalf("the log's marks %v do not say when the link was shaped and lifted", marks)
	}
	l := NewLink()
	var reached time.Duration = -1
	var judged, within int
	nextRound := acks[0].Now
	for i := 0; i < len(acks); {
		now := acks[i].Now
		for ; nextRound <= now; nextRound += 250 * time.Millisecond { // the rounds' merge
			l.est.OnAcks(nextRound, l.merge.ready(nextRound))
			est, ok := l.est.Estimate()
			switch {
			case nextRound < shapedAt || nextRound >= liftedAt:
			case reached < 0 && ok && est <= rate:
				reached = nextRound - shapedAt
			case nextRound >= shapedAt+3*time.Second:
				judged++
				if ok && est >= 0.5*rate && est <= 1.1*rate {
					within++
				}
			}
		}
		// One feedback packet's acks: those of one leg logged at one time.
		j := i
		for j < len(acks) && acks[j].Now == now && acks[j].Leg == acks[i].Leg {
			j++
		}
		if acks[i].Link == receiver {
			batch := make([]Ack, 0, j-i)
			for _, a := range acks[i:j] {
				batch = append(batch, a.Ack)
			}
			l.OnFeedback(acks[i].Leg, now, batch)
		}
		i = j
	}
	t.Logf("shaped to %.0f kbit/s: the estimate under it after %v; within [50%%, 110%%] of it in %d of %d rounds from 3 s on",
		rate/1000, reached, within, judged)
	if reached < 0 || reached > 1500*time.Millisecond {
		t.Errorf("the estimate came under the shaper's rate %v after it was shaped, want within 1.5 s", reached)
	}
	if judged == 0 || float64(within) < 0.9*float64(judged) {
		t.Errorf("the estimate was within [50%%, 110%%] of the shaper's rate in %d of %d rounds", within, judged)
	}
}
