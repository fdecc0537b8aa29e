package leg

import (
	"time"

	"github.com/pion/rtcp"
)

// answerReferenceTime answers a receiver's reference time report (RFC
// 3611 4.4, RRTR) at once, on its leg, with the delay since it (4.5,
// DLRR), from which the receiver takes its round-trip time: a receive-only
// connection learns one no other way (it sends no media a report block
// could be about). Without one, libwebrtc takes 100 ms, and asks again for
// a packet whose retransmission was lost only that much later. (Chromium
// 156 sent no RRTR in the meeting tests, even with "a=rtcp-fb:<pt> rrtr"
// added to its answer; docs/sfu.md.)
func (l *Leg) answerReferenceTime(xr *rtcp.ExtendedReport, received time.Duration) {
	if l.dp == nil {
		return
	}
	var reports []rtcp.DLRRReport
	for _, b := range xr.Reports {
		if rr, ok := b.(*rtcp.ReceiverReferenceTimeReportBlock); ok {
			// The middle 32 bits of its NTP timestamp, as an SR's LSR.
			reports = append(reports, rtcp.DLRRReport{SSRC: xr.SenderSSRC, LastRR: uint32(rr.NTPTimestamp >> 16)})
		}
	}
	if len(reports) == 0 {
		return
	}
	delay := l.sender.t.cfg.Now() - received
	for i := range reports {
		reports[i].DLRR = uint32(max(0, delay) * 65536 / time.Second) // units of 1/65536 s
	}
	b, err := (&rtcp.ExtendedReport{SenderSSRC: sfuSSRC, Reports: []rtcp.ReportBlock{&rtcp.DLRRReportBlock{Reports: reports}}}).Marshal()
	if err == nil {
		_ = l.dp.Send(b, 0)
	}
}
