package leg

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The legs' metrics are summed by default (a meeting of n has n(n-1)
// legs); per sender and receiver only with labels "receiver".
func TestCollector(t *testing.T) {
	table, plane, _, now := newTable(t)
	for seq := uint16(100); seq < 110; seq++ {
		plane.history[seq] = media(t, seq)
	}
	plane.legs[recvA].original = func(n uint16) (uint16, bool) { return n + 50, n != 52 }
	*now += time.Second
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, nack(50, 52, 53)))

	summed := `
# HELP ebrtc_sfu_retransmissions_total Packets receivers NACKed, by what became of them: sent (from the SFU's history), asked (the sender, for what the SFU never got), not_owed (a layer the receiver does not get), paced (waited for room in its link's budget), repeated (NACKed again while waiting or within the round trip), superseded (given up for a key frame asked of the sender), doubled (of sent, sent a second time on a link losing packets at random); paced and repeated also count packets later sent or superseded.
# TYPE ebrtc_sfu_retransmissions_total counter
ebrtc_sfu_retransmissions_total{result="asked"} 0
ebrtc_sfu_retransmissions_total{result="doubled"} 0
ebrtc_sfu_retransmissions_total{result="not_owed"} 1
ebrtc_sfu_retransmissions_total{result="paced"} 0
ebrtc_sfu_retransmissions_total{result="repeated"} 0
ebrtc_sfu_retransmissions_total{result="sent"} 2
ebrtc_sfu_retransmissions_total{result="superseded"} 0
`
	if err := testutil.CollectAndCompare(NewCollector(table, "none"), strings.NewReader(summed), "ebrtc_sfu_retransmissions_total"); err != nil {
		t.Error(err)
	}
	c := NewCollector(table, "none")
	if n := testutil.CollectAndCount(c, "ebrtc_sfu_leg_target", "ebrtc_sfu_link_estimate_bps"); n != 0 {
		t.Errorf("%d per-leg series without labels receiver", n)
	}
	if n := testutil.CollectAndCount(c, "ebrtc_sfu_legs"); n < 1 {
		t.Error("no ebrtc_sfu_legs")
	}

	perLeg := NewCollector(table, "receiver")
	if n := testutil.CollectAndCount(perLeg, "ebrtc_sfu_leg_target"); n != 2 {
		t.Errorf("%d ebrtc_sfu_leg_target series, want one per leg (2)", n)
	}
	want := `
# HELP ebrtc_sfu_retransmissions_total Packets receivers NACKed, by what became of them: sent (from the SFU's history), asked (the sender, for what the SFU never got), not_owed (a layer the receiver does not get), paced (waited for room in its link's budget), repeated (NACKed again while waiting or within the round trip), superseded (given up for a key frame asked of the sender), doubled (of sent, sent a second time on a link losing packets at random); paced and repeated also count packets later sent or superseded.
# TYPE ebrtc_sfu_retransmissions_total counter
`
	for _, r := range []string{"A", "B"} {
		sent, notOwed := "0", "0"
		if r == "A" {
			sent, notOwed = "2", "1"
		}
		for _, kv := range [][2]string{{"asked", "0"}, {"doubled", "0"}, {"not_owed", notOwed}, {"paced", "0"}, {"repeated", "0"}, {"sent", sent}, {"superseded", "0"}} {
			want += `ebrtc_sfu_retransmissions_total{receiver="` + r + `",result="` + kv[0] + `",room="r",sender="pub"} ` + kv[1] + "\n"
		}
	}
	if err := testutil.CollectAndCompare(perLeg, strings.NewReader(want), "ebrtc_sfu_retransmissions_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(perLeg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
