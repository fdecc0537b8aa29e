package controller

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/sdp/v3"
	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/agent"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/leg"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// plane records what the controller asks of the data plane; Send sends
// from sock (nil: nothing is sent).
type plane struct {
	mu      sync.Mutex
	streams map[netip.AddrPort][]dataplane.Receiver
	ssrcs   map[netip.AddrPort][]dataplane.Source
	waiting int // receivers every stream says wait for a key frame
	sock    *net.UDPConn
}

func (p *plane) SetStream(from netip.AddrPort, ssrcs []dataplane.Source, rs []dataplane.Receiver) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams[from], p.ssrcs[from] = slices.Clone(rs), slices.Clone(ssrcs)
	return nil
}

func (p *plane) RemoveStream(from netip.AddrPort) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.streams[from]; !ok {
		return errors.New("no stream")
	}
	delete(p.streams, from)
	return nil
}

func (p *plane) StreamStats(from netip.AddrPort) (dataplane.StreamStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st dataplane.StreamStats
	for i, r := range p.streams[from] {
		st.Out = append(st.Out, dataplane.ReceiverStats{To: r.To, Waiting: i < p.waiting})
	}
	return st, nil
}
func (p *plane) Outcomes() (map[dataplane.Outcome]dataplane.Counter, error) { return nil, nil }
func (p *plane) Close() error                                               { return nil }
func (p *plane) Layers(netip.AddrPort) (dataplane.Layers, error)            { return dataplane.Layers{}, nil }
func (p *plane) Packet(netip.AddrPort, uint16) ([]byte, bool)               { return nil, false }
func (p *plane) Leg(_, _ netip.AddrPort) (dataplane.Leg, error)             { return noLeg{}, nil }
func (p *plane) AudioLevels(netip.AddrPort) (dataplane.AudioLevels, error) {
	return dataplane.AudioLevels{}, nil
}
func (p *plane) Arrivals(netip.AddrPort) (*dataplane.ArrivalLog, error) {
	return nil, errors.New("none")
}

func (p *plane) Send(b []byte, _, to netip.AddrPort) error {
	if p.sock == nil {
		return nil
	}
	_, err := p.sock.WriteToUDPAddrPort(b, to)
	return err
}

// noLeg is a leg the controller tests never exercise.
type noLeg struct{}

func (noLeg) SetTarget(int) error                      { return nil }
func (noLeg) State() (dataplane.ReceiverLayers, error) { return dataplane.ReceiverLayers{}, nil }
func (noLeg) Original(n uint16) (uint16, bool)         { return n, true }
func (noLeg) Packet(uint16) ([]byte, bool)             { return nil, false }
func (noLeg) FrameSent(uint16) (bool, bool)            { return true, true }
func (noLeg) Send([]byte, int) error                   { return nil }
func (noLeg) Sent(uint16) (dataplane.Sent, bool)       { return dataplane.Sent{}, false }
func (noLeg) TWCC() bool                               { return false }

// inbox collects one participant's messages.
type inbox struct{ msgs []Message }

func (b *inbox) send(m Message) { b.msgs = append(b.msgs, m) }

func (b *inbox) last(t *testing.T, typ string) Message {
	t.Helper()
	for i := len(b.msgs) - 1; i >= 0; i-- {
		if b.msgs[i].Type == typ {
			return b.msgs[i]
		}
	}
	t.Fatalf("no %q message in %v", typ, b.msgs)
	return Message{}
}

var sfuMedia = netip.MustParseAddrPort("10.0.0.1:40000")

type world struct {
	c     *Controller
	ice   *agent.ICE
	legs  *leg.Table
	plane *plane
	now   time.Time
}

func newWorld(t *testing.T) *world { return newWorldOn(t, sfuMedia, nil) }

// newWorldOn: the SFU's media address, and its socket if the test needs
// the SFU to send (nil: nothing is sent).
func newWorldOn(t *testing.T, media netip.AddrPort, sock *net.UDPConn) *world {
	w := &world{plane: &plane{streams: map[netip.AddrPort][]dataplane.Receiver{}, ssrcs: map[netip.AddrPort][]dataplane.Source{},
		sock: sock}, now: time.Unix(1000, 0)}
	w.ice = agent.NewICE(agent.ICEConfig{Now: func() time.Time { return w.now }})
	var err error
	w.legs, err = leg.NewTable(leg.Config{Plane: w.plane, Routes: leg.NewRoutes(), Now: func() time.Duration { return w.now.Sub(time.Unix(0, 0)) }})
	if err != nil {
		t.Fatal(err)
	}
	if w.c, err = New(Config{Media: []netip.AddrPort{media}, ICE: w.ice, Legs: w.legs}); err != nil {
		t.Fatal(err)
	}
	return w
}

// When a receiver is added to a stream, the publisher is asked for a key
// frame of its video (a PLI from the SFU's socket): the newcomer can decode
// nothing before one, and the data plane holds its video back until then.
// While it still waits, the rounds ask again every second; then no more.
func TestNewReceiverGetsAKeyFrameRequested(t *testing.T) {
	sfuSock, pubSock := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	w := newWorldOn(t, sfuSock.LocalAddr().(*net.UDPAddr).AddrPort(), sfuSock)
	offer := synth.ChromiumOffer
	var a, b inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	if err := w.c.Publish(pa, Camera, offer); err != nil {
		t.Fatal(err)
	}
	pb, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	if err := w.c.Answer(pb, pa.ID, receiverAnswer("bbbb")); err != nil {
		t.Fatal(err)
	}
	pubAddr := pubSock.LocalAddr().(*net.UDPAddr).AddrPort()
	w.check(t, a.last(t, "answer").SDP, "WBQv", pubAddr)
	w.check(t, b.last(t, "offer").SDP, "bbbb", netip.MustParseAddrPort("127.0.0.1:9"))
	vm := pa.pubs[Camera].publish.Media[1]
	video := vm.SSRCs[0]
	rtx := dataplane.RTX{PT: uint8(vm.RTXPayloadType), MediaPT: uint8(vm.PayloadType), SSRC: vm.RTXSSRC}
	want := []dataplane.Source{{SSRC: pa.pubs[Camera].publish.Media[0].SSRCs[0], TWCCExt: 3, LevelExt: 1}, {SSRC: video, Video: dataplane.AV1, TWCCExt: 3, History: true, RTX: &rtx}}
	got := w.plane.ssrcs[pubAddr]
	if !slices.EqualFunc(got, want, func(a, b dataplane.Source) bool {
		same := (a.RTX == nil) == (b.RTX == nil) && (a.RTX == nil || *a.RTX == *b.RTX)
		a.RTX, b.RTX = nil, nil
		return same && a == b
	}) || !vm.PublisherRTX {
		t.Errorf("sources %+v, want %+v (video gated as AV1 with a history and the publisher's RTX, audio not, its levels read)", got, want)
	}
	expectPLI(t, pubSock, sfuSock, video, 2*time.Second)
	second := func() {
		for range 4 {
			w.now = w.now.Add(leg.RoundInterval)
			w.legs.Round()
		}
	}
	w.plane.waiting = 1
	second()
	expectPLI(t, pubSock, sfuSock, video, 2*time.Second)
	w.plane.waiting = 0
	second()
	if err := pubSock.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := pubSock.Read(make([]byte, 1500)); err == nil {
		t.Error("a key frame was asked for with nobody waiting")
	}
	// The publisher's camera off and on again: a key frame is asked for
	// (receivers that joined meanwhile wait for one); off, none is.
	w.now = w.now.Add(time.Minute) // past the interval between requests
	if err := w.c.Mute(pa, "video", true); err != nil {
		t.Fatal(err)
	}
	if err := pubSock.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := pubSock.Read(make([]byte, 1500)); err == nil {
		t.Error("a key frame was asked for as the camera went off")
	}
	if err := w.c.Mute(pa, "video", false); err != nil {
		t.Fatal(err)
	}
	expectPLI(t, pubSock, sfuSock, video, 2*time.Second)
}

func expectPLI(t *testing.T, pubSock, sfuSock *net.UDPConn, video uint32, within time.Duration) {
	t.Helper()
	buf := make([]byte, 1500)
	if err := pubSock.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	n, from, err := pubSock.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("no key-frame request reached the publisher: %v", err)
	}
	pkts, err := rtcp.Unmarshal(buf[:n])
	if pli, ok := pkts[0].(*rtcp.PictureLossIndication); err != nil || !ok || pli.MediaSSRC != video || from != sfuSock.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Errorf("publisher got %v (%v) from %v, want a PLI for its video SSRC %d from the SFU's socket", pkts, err, from, video)
	}
}

// check is a browser's connectivity check for the connection described by
// sdpText (the SFU's answer or offer: its ufrag and password), from addr.
func (w *world) check(t *testing.T, sdpText, remoteUfrag string, from netip.AddrPort) {
	t.Helper()
	var s sdp.SessionDescription
	if err := s.UnmarshalString(sdpText); err != nil {
		t.Fatal(err)
	}
	ufrag, _ := s.MediaDescriptions[0].Attribute("ice-ufrag")
	pwd, _ := s.MediaDescriptions[0].Attribute("ice-pwd")
	m, err := stun.Build(stun.TransactionID, stun.BindingRequest, stun.NewUsername(ufrag+":"+remoteUfrag),
		stun.RawAttribute{Type: stun.AttrUseCandidate}, stun.NewShortTermIntegrity(pwd), stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.ice.Handle(m.Raw, from)
	if err != nil {
		t.Fatal(err)
	}
	r := &stun.Message{Raw: resp}
	if r.Decode() != nil || r.Type != stun.BindingSuccess {
		t.Fatalf("check refused: %v", r)
	}
}

func receiverAnswer(ufrag string) string {
	return "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 RTP/AVPF 45\r\nc=IN IP4 0.0.0.0\r\na=ice-ufrag:" +
		ufrag + "\r\na=ice-pwd:0123456789abcdefghijklmn\r\na=mid:1\r\na=recvonly\r\n"
}

// A publishes, B joins and answers; as their checks bind them, A's stream
// goes to B's address from the SFU's; when B leaves, nobody receives it;
// when A leaves, it is gone.
func TestMeetingDrivesTheDataPlane(t *testing.T) {
	w := newWorld(t)
	offer := synth.ChromiumOffer
	var a, b inbox
	pa, err := w.c.Join(access.Grant{Room: "room-1", Publish: true}, a.send)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.c.Publish(pa, Camera, offer); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Publish(pa, Camera, offer); err == nil {
		t.Error("published twice")
	}
	answerA := a.last(t, "answer").SDP
	pb, err := w.c.Join(access.Grant{Room: "room-1", Publish: true}, b.send)
	if err != nil {
		t.Fatal(err)
	}
	offerB := b.last(t, "offer")
	if offerB.ID != pa.ID || !strings.Contains(offerB.SDP, "a=sendonly") {
		t.Fatalf("B's offer %+v", offerB)
	}
	if err := w.c.Answer(pb, pa.ID, receiverAnswer("bbbb")); err != nil {
		t.Fatal(err)
	}

	addrA, addrB := netip.MustParseAddrPort("10.0.0.5:5000"), netip.MustParseAddrPort("10.0.0.6:6000")
	w.check(t, answerA, "WBQv", addrA) // the fixture's ufrag
	if rs, ok := w.plane.streams[addrA]; !ok || len(rs) != 0 || len(w.plane.ssrcs[addrA]) != 2 {
		t.Fatalf("A bound: stream %v %v", rs, w.plane.ssrcs[addrA])
	}
	w.check(t, offerB.SDP, "bbbb", addrB)
	want := []dataplane.Receiver{{From: sfuMedia, To: addrB, TTL: 64}}
	if rs := w.plane.streams[addrA]; !slices.Equal(rs, want) {
		t.Fatalf("B bound: receivers %v, want %v", rs, want)
	}

	if err := w.c.Leave(pb); err != nil {
		t.Fatal(err)
	}
	if rs := w.plane.streams[addrA]; len(rs) != 0 {
		t.Errorf("after B left: receivers %v", rs)
	}
	if err := w.c.Leave(pa); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.plane.streams[addrA]; ok {
		t.Error("A's stream outlived A")
	}
	if len(w.c.rooms) != 0 || len(w.c.conns) != 0 {
		t.Errorf("left behind: %d rooms, %d connections", len(w.c.rooms), len(w.c.conns))
	}
}

// A receiver whose consent lapses stops receiving; its next check brings
// it back.
func TestConsentExpiryRemovesReceivers(t *testing.T) {
	w := newWorld(t)
	offer := synth.ChromiumOffer
	var a, b inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	if err := w.c.Publish(pa, Camera, offer); err != nil {
		t.Fatal(err)
	}
	pb, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	if err := w.c.Answer(pb, pa.ID, receiverAnswer("bbbb")); err != nil {
		t.Fatal(err)
	}
	addrA, addrB := netip.MustParseAddrPort("10.0.0.5:5000"), netip.MustParseAddrPort("10.0.0.6:6000")
	w.check(t, a.last(t, "answer").SDP, "WBQv", addrA)
	w.check(t, b.last(t, "offer").SDP, "bbbb", addrB)
	w.now = w.now.Add(20 * time.Second)
	w.check(t, a.last(t, "answer").SDP, "WBQv", addrA) // A keeps checking, B does not
	w.now = w.now.Add(agent.ConsentTimeout - 20*time.Second)
	w.c.Expired(w.ice.Expire())
	if rs := w.plane.streams[addrA]; len(rs) != 0 {
		t.Fatalf("B's consent lapsed, receivers %v", rs)
	}
	w.check(t, b.last(t, "offer").SDP, "bbbb", addrB)
	if rs := w.plane.streams[addrA]; len(rs) != 1 {
		t.Errorf("B checked again, receivers %v", rs)
	}
}

func TestRefusals(t *testing.T) {
	w := newWorld(t)
	var a inbox
	for _, name := range []string{"", "a b", strings.Repeat("x", 65), "../etc"} {
		if _, err := w.c.Join(access.Grant{Room: name, Publish: true}, a.send); err == nil {
			t.Errorf("joined room %q", name)
		}
	}
	p, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	if err := w.c.Publish(p, Camera, "garbage"); err == nil {
		t.Error("published garbage")
	}
	if err := w.c.Answer(p, "nobody", receiverAnswer("x")); err == nil {
		t.Error("answered an offer never made")
	}
	// A video codec whose key frames the data plane cannot find would
	// leave every new receiver waiting: refused at start, naming it.
	_, err := New(Config{Media: []netip.AddrPort{sfuMedia}, ICE: w.ice, Legs: w.legs,
		Codecs: signaling.Codecs{Audio: "opus", Video: "H265"}})
	if err == nil || !strings.Contains(err.Error(), "video codec \"H265\"") {
		t.Errorf("H265 video: %v", err)
	}
}

// A publisher's camera and microphone turned off and on reach every
// other participant, and a receiver joining later learns them with the
// stream's offer; a viewer (or anyone not publishing) cannot say it
// muted, nor publish; a name travels with the offer.
func TestMuteAndViewers(t *testing.T) {
	w := newWorld(t)
	var a, b, v, late inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Identity: "ann", Name: "Ann", Publish: true}, a.send)
	if err := w.c.Mute(pa, "video", true); err == nil {
		t.Error("muted before publishing")
	}
	if err := w.c.Publish(pa, Camera, synth.ChromiumOffer); err != nil {
		t.Fatal(err)
	}
	w.c.Join(access.Grant{Room: "r", Identity: "bob", Publish: true}, b.send)
	pv, _ := w.c.Join(access.Grant{Room: "r", Identity: "vic"}, v.send)
	if m := v.last(t, "offer"); m.ID != pa.ID || m.Name != "Ann" || len(m.Muted) != 0 {
		t.Errorf("the viewer's offer: %+v", m)
	}
	if err := w.c.Publish(pv, Camera, synth.ChromiumOffer); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Errorf("a viewer published: %v", err)
	}
	if err := w.c.Mute(pv, "audio", true); err == nil {
		t.Error("a viewer muted")
	}
	for _, step := range []struct {
		kind  string
		muted bool
		want  []string
	}{{"video", true, []string{"video"}}, {"audio", true, []string{"audio", "video"}}, {"video", false, []string{"audio"}}} {
		if err := w.c.Mute(pa, step.kind, step.muted); err != nil {
			t.Fatal(err)
		}
		for _, in := range []*inbox{&b, &v} {
			if m := in.last(t, "muted"); m.ID != pa.ID || !slices.Equal(m.Muted, step.want) {
				t.Errorf("after %s %v: %+v, want %v", step.kind, step.muted, m, step.want)
			}
		}
	}
	if err := w.c.Mute(pa, "screen", true); err == nil {
		t.Error("muted a kind that does not exist")
	}
	w.c.Join(access.Grant{Room: "r", Identity: "lee"}, late.send)
	if m := late.last(t, "offer"); !slices.Equal(m.Muted, []string{"audio"}) {
		t.Errorf("a later receiver's offer: %+v", m)
	}
	for _, m := range a.msgs {
		if m.Type == "muted" {
			t.Errorf("the publisher was told of its own mute: %+v", m)
		}
	}
}

// screenOffer is a publisher's offer for a screen: ChromiumOffer's video
// section alone, under other ICE credentials and SSRCs (its own
// connection).
func screenOffer() string {
	o := synth.ChromiumOffer
	session, media, _ := strings.Cut(o, "m=audio")
	_, video, _ := strings.Cut(media, "m=video")
	session = strings.Replace(session, "a=group:BUNDLE 0 1", "a=group:BUNDLE 1", 1)
	return strings.NewReplacer("WBQv", "SCRN", "1686647932", "1111", "492916855", "2222").Replace(session + "m=video" + video)
}

// A participant shares its screen on a connection of its own: every other
// participant (one there, one joining later) gets an offer for it under
// its own id, and the data plane a stream of its own (its own key-frame
// gate, layers and legs) beside the camera's; one screen at a time, none
// from a viewer; when sharing stops, the receivers are told, its stream
// goes and the camera's stays; when its owner leaves, both go.
func TestScreenShare(t *testing.T) {
	w := newWorld(t)
	var a, b, c, v inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	pb, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	testenv.Must(t, w.c.Publish(pa, Camera, synth.ChromiumOffer))
	camAnswer := a.last(t, "answer")
	testenv.Must(t, w.c.Publish(pa, Screen, screenOffer()))
	scrAnswer := a.last(t, "answer")
	if camAnswer.Source != Camera || scrAnswer.Source != Screen {
		t.Errorf("answers for %q and %q, want camera then screen", camAnswer.Source, scrAnswer.Source)
	}
	if err := w.c.Publish(pa, Screen, screenOffer()); err == nil {
		t.Error("a second screen published")
	}
	if err := w.c.Publish(pa, "window", screenOffer()); err == nil {
		t.Error("a source that is neither camera nor screen published")
	}
	pv, _ := w.c.Join(access.Grant{Room: "r"}, v.send)
	if err := w.c.Publish(pv, Screen, screenOffer()); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Errorf("a viewer shared its screen: %v", err)
	}
	screenID := pa.ID + ":screen"
	offers := func(in *inbox) map[string]Message {
		out := map[string]Message{}
		for _, m := range in.msgs {
			if m.Type == "offer" {
				out[m.ID] = m
			}
		}
		return out
	}
	pc, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, c.send)
	for name, in := range map[string]*inbox{"there before": &b, "joining later": &c} {
		o := offers(in)
		if o[pa.ID].Source != Camera || o[screenID].Source != Screen || o[screenID].Owner != pa.ID || len(o) != 2 {
			t.Errorf("participant %s got offers %+v, want A's camera and screen", name, o)
		}
	}
	testenv.Must(t, w.c.Answer(pb, pa.ID, receiverAnswer("bbbb")))
	testenv.Must(t, w.c.Answer(pb, screenID, receiverAnswer("bbss")))
	camA, scrA := netip.MustParseAddrPort("10.0.0.5:5000"), netip.MustParseAddrPort("10.0.0.5:5002")
	camB, scrB := netip.MustParseAddrPort("10.0.0.6:6000"), netip.MustParseAddrPort("10.0.0.6:6002")
	w.check(t, camAnswer.SDP, "WBQv", camA)
	w.check(t, scrAnswer.SDP, "SCRN", scrA)
	o := offers(&b)
	w.check(t, o[pa.ID].SDP, "bbbb", camB)
	w.check(t, o[screenID].SDP, "bbss", scrB)
	for from, to := range map[netip.AddrPort]netip.AddrPort{camA: camB, scrA: scrB} {
		if rs := w.plane.streams[from]; !slices.Equal(rs, []dataplane.Receiver{{From: sfuMedia, To: to, TTL: 64}}) {
			t.Errorf("stream from %v goes to %v, want %v", from, rs, to)
		}
	}
	if src := w.plane.ssrcs[scrA]; len(src) != 1 || src[0].SSRC != 1111 || src[0].Video != dataplane.AV1 {
		t.Errorf("the screen's stream has sources %+v, want its video alone (SSRC 1111), gated", src)
	}
	if st := w.c.Streams(); len(st) != 2 {
		t.Errorf("streams %+v, want the camera's and the screen's", st)
	}

	testenv.Must(t, w.c.Unpublish(pa, Screen))
	if m := b.last(t, "left"); m.ID != screenID {
		t.Errorf("B told %+v, want the screen %s left", m, screenID)
	}
	if _, ok := w.plane.streams[scrA]; ok {
		t.Error("the screen's stream outlived the sharing")
	}
	if rs := w.plane.streams[camA]; len(rs) != 1 {
		t.Errorf("the camera's stream lost its receivers with the screen: %v", rs)
	}
	if err := w.c.Unpublish(pa, Screen); err == nil {
		t.Error("a screen no longer shared unpublished again")
	}
	testenv.Must(t, w.c.Publish(pa, Screen, screenOffer())) // again
	if m := c.last(t, "offer"); m.ID != screenID {
		t.Errorf("C's last offer %+v, want the screen again", m)
	}
	testenv.Must(t, w.c.Leave(pa))
	left := map[string]bool{}
	for _, m := range b.msgs {
		if m.Type == "left" {
			left[m.ID] = true
		}
	}
	if !left[pa.ID] || !left[screenID] {
		t.Errorf("B told of %v leaving, want A's camera and screen", left)
	}
	if _, ok := w.plane.streams[camA]; ok {
		t.Error("A's camera stream outlived A")
	}
	testenv.Must(t, w.c.Leave(pb))
	testenv.Must(t, w.c.Leave(pc))
	testenv.Must(t, w.c.Leave(pv))
	if len(w.c.rooms) != 0 || len(w.c.conns) != 0 {
		t.Errorf("left behind: %d rooms, %d connections", len(w.c.rooms), len(w.c.conns))
	}
}

// The room's dominant speaker is told to everyone in it, and to a
// participant joining later with the streams' offers; other rooms hear
// nothing of it.
func TestSpeakerTold(t *testing.T) {
	w := newWorld(t)
	var a, b, c, other inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	w.c.Join(access.Grant{Room: "elsewhere", Publish: true}, other.send)
	testenv.Must(t, w.c.Publish(pa, Camera, synth.ChromiumOffer))
	w.c.Speaker("r", pa.ID)
	for name, in := range map[string]*inbox{"a": &a, "b": &b} {
		if m := in.last(t, "speaker"); m.ID != pa.ID {
			t.Errorf("%s told %+v", name, m)
		}
	}
	w.c.Join(access.Grant{Room: "r", Publish: true}, c.send)
	if m := c.last(t, "speaker"); m.ID != pa.ID {
		t.Errorf("a participant joining later told %+v", m)
	}
	for _, m := range other.msgs {
		if m.Type == "speaker" {
			t.Errorf("another room told %+v", m)
		}
	}
	w.c.Speaker("gone", "x") // a room that emptied meanwhile
	w.c.Speaker("r", "")     // the speaker left
	if m := b.last(t, "speaker"); m.ID != "" {
		t.Errorf("told %+v when the speaker left", m)
	}
}

// A joining participant is handed its TURN servers, with credentials for
// its identity (in an open room, where it has none, for its id).
func TestJoinedHandsTURNServers(t *testing.T) {
	w := newWorld(t)
	w.c.cfg.ICEServers = func(user string, _ time.Time) []ICEServer {
		return []ICEServer{{URLs: []string{"turn:192.0.2.1:3478?transport=tcp"}, Username: "exp:" + user, Credential: "c"}}
	}
	var a, b inbox
	w.c.Join(access.Grant{Room: "r", Identity: "ann", Publish: true}, a.send)
	pb, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	if m := a.last(t, "joined"); len(m.ICEServers) != 1 || m.ICEServers[0].Username != "exp:ann" {
		t.Errorf("ann's joined: %+v", m)
	}
	if m := b.last(t, "joined"); len(m.ICEServers) != 1 || m.ICEServers[0].Username != "exp:"+pb.ID {
		t.Errorf("an open room's participant's joined: %+v", m)
	}
}

// chromiumSimulcastOffer is Chromium's offer of its camera as three
// encodings (package signaling's testdata), as with encryption off (the
// test world forwards plain RTP).
func chromiumSimulcastOffer(t *testing.T) string {
	b, err := os.ReadFile("../signaling/testdata/chromium-simulcast-offer.sdp")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(string(b), "UDP/TLS/RTP/SAVPF", "RTP/AVPF"), "\n") {
		if !strings.HasPrefix(l, "a=fingerprint:") && !strings.HasPrefix(l, "a=setup:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Pages are told whether the SFU takes simulcast (joined). One that does
// answers a simulcast offer taking every encoding and installs the video
// as one simulcast source (its encodings' SSRCs to learn, the SFU's SSRC
// for receivers, who are offered that one stream); one that does not (the
// eBPF data plane) refuses the offer, saying why.
func TestSimulcastPublication(t *testing.T) {
	offer := chromiumSimulcastOffer(t)
	w := newWorld(t)
	var a inbox
	pa, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, a.send)
	if a.last(t, "joined").Simulcast {
		t.Error("pages told of simulcast by an SFU without it")
	}
	if err := w.c.Publish(pa, Camera, offer); err == nil || !strings.Contains(err.Error(), "simulcast") {
		t.Errorf("a simulcast offer to an SFU without it: %v", err)
	}

	w = newWorld(t)
	w.c.cfg.Simulcast = true
	var b, c inbox
	pb, _ := w.c.Join(access.Grant{Room: "r", Publish: true}, b.send)
	w.c.Join(access.Grant{Room: "r"}, c.send)
	if !b.last(t, "joined").Simulcast {
		t.Error("pages not told of simulcast")
	}
	testenv.Must(t, w.c.Publish(pb, Camera, offer))
	answer := b.last(t, "answer").SDP
	if !strings.Contains(answer, "a=simulcast:recv q;h;f") || !strings.Contains(answer, "a=rid:f recv") {
		t.Fatalf("the answer does not take the encodings:\n%s", answer)
	}
	ufrag := strings.TrimSpace(strings.SplitN(strings.SplitN(offer, "a=ice-ufrag:", 2)[1], "\n", 2)[0])
	from := netip.MustParseAddrPort("10.0.0.7:7000")
	w.check(t, answer, ufrag, from)
	var sim *dataplane.Simulcast
	for _, src := range w.plane.ssrcs[from] {
		if src.Simulcast != nil {
			sim = src.Simulcast
			if src.SSRC != 0 || src.Video == dataplane.NoVideo {
				t.Errorf("the simulcast video's source %+v, want SSRC 0 (learnt per encoding), video", src)
			}
		}
	}
	if sim == nil || strings.Join(sim.RIDs, ";") != "q;h;f" || sim.RIDExt != 10 || sim.SSRC == 0 {
		t.Fatalf("sources %+v: want one simulcast video of q, h, f", w.plane.ssrcs[from])
	}
	if o := c.last(t, "offer").SDP; !strings.Contains(o, fmt.Sprintf("a=ssrc:%d ", sim.SSRC)) || strings.Contains(o, "simulcast") {
		t.Errorf("the viewer's offer is not one stream under the SFU's SSRC %d:\n%s", sim.SSRC, o)
	}
}
