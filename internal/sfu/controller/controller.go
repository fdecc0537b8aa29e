// Package controller is the SFU's controller: rooms and participants, the
// descriptions each connection gets, and, as connectivity checks bind
// connections to addresses, what the data plane and the agent are told.
// It is transport-agnostic: the signaling server feeds it messages and
// sends what it emits.
package controller

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/agent"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/leg"
	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

// Message is what the controller sends a participant.
type Message struct {
	Type string `json:"type"` // joined, answer, offer, left, paused, resumed, muted, speaker, replaced, error
	// ID is, in joined, yours; in muted, the publisher's; in offer, left,
	// paused, resumed and speaker (the room's dominant speaker), the
	// published stream's: its publisher's id for its camera and
	// microphone, with ":screen" for its screen.
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"` // joined: yours; offer: the publisher's (its token's display name)
	// Source (offer, answer) is what the stream shows: "camera" (and
	// microphone) or "screen".
	Source string `json:"source,omitempty"`
	// Token (joined) is a join token for rejoining (a reload): each token
	// joins once.
	Token string `json:"token,omitempty"`
	// Muted (offer, muted) are the kinds the publisher has turned off
	// (audio: its microphone muted; video: its camera off).
	Muted []string `json:"muted,omitempty"`
	Owner string   `json:"owner,omitempty"` // offer: the publisher's id
	SDP   string   `json:"sdp,omitempty"`   // answer, offer
	Text  string   `json:"text,omitempty"`  // error
	// Reason (paused) is why: "bandwidth" (the receiver's link carries
	// too little) or "last-n" (not among its most recent speakers).
	Reason string `json:"reason,omitempty"`
	// Media is how media travels in the room (joined): "encrypted"
	// (DTLS-SRTP) or "plain" (--unencrypted-media).
	Media string `json:"media,omitempty"`
	// ICEServers (joined) are TURN servers with credentials of the
	// participant's own, for its connections (RTCConfiguration's).
	ICEServers []ICEServer `json:"iceServers,omitempty"`
	// Simulcast (joined): the SFU takes a camera as several encodings
	// (RFC 8853), and gives each receiver the one its link carries.
	Simulcast bool `json:"simulcast,omitempty"`
}

// ICEServer is a TURN server as a browser's RTCIceServer takes it.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// Config of a controller.
type Config struct {
	Codecs signaling.Codecs
	// Media are the SFU's media sockets' addresses (one per family): its
	// ICE candidates, and where replicas and feedback leave from.
	Media []netip.AddrPort
	TTL   uint8 // of replicas
	ICE   *agent.ICE
	// Legs holds each publisher's stream and its receivers' legs.
	Legs *leg.Table
	// Adapt: the data plane reads each stream's dependency descriptor, so
	// that receivers' layers can follow their links.
	Adapt bool
	// PublisherStartKbps, if set, is the uplink estimate publishers are
	// told to start from (signaling.Publish.StartKbps).
	PublisherStartKbps int
	// Security, if set, makes media encrypted (DTLS-SRTP on every
	// connection, secure.go); nil: plain RTP (--unencrypted-media).
	Security *Security
	// MaxRooms and MaxParticipants bound the rooms and each room's
	// participants (0: 1,000 rooms, 500 participants a room); a join
	// past them is refused (access.Rooms, access.RoomFull).
	MaxRooms, MaxParticipants int
	// ICEServers, if set, are a joining participant's TURN servers (its
	// user: the identity of its token, or its id in open rooms).
	ICEServers func(user string, now time.Time) []ICEServer
	// Simulcast: the data plane takes simulcast video (both planes do,
	// with rate adaptation on); participants are told so (joined), and
	// offers of it are refused without.
	Simulcast bool
}

// Controller holds the rooms.
type Controller struct {
	cfg   Config
	video dataplane.Codec // cfg.Codecs.Video, as the data plane sees its key frames

	mu    sync.Mutex
	rooms map[string]*room
	conns map[string]*conn // by our ICE ufrag
}

type room struct {
	name    string
	parts   map[string]*Participant
	speaker string // the dominant speaker's stream (Speaker), told to newcomers
}

// Participant is one browser in a room.
type Participant struct {
	ID    string
	grant access.Grant // who it is and whether it may publish
	room  *room
	send  func(Message)
	left  bool     // Leave ran (or a newer join of its identity replaced it)
	muted []string // the kinds it has turned off, sorted (Mute)

	pubs map[string]*publication // what it publishes, by source (camera, screen)
	recv map[string]*conn        // its receive-only connections, by stream id
}

// conn is one PeerConnection between a browser and the SFU.
type conn struct {
	owner     *Participant
	stream    *publication // the stream it sends (stream.conn is it) or receives
	ice       agent.Session
	addr      netip.AddrPort           // bound by a check; invalid until then
	answer    signaling.ReceiverAnswer // for a receive-only connection: what it accepted
	dropped   bool
	tr        *secure.Transport // encrypted media: its DTLS-SRTP
	protected netip.AddrPort    // the address the data plane has its keys for
}

// New is a controller without rooms.
func New(cfg Config) (*Controller, error) {
	if cfg.ICE == nil || cfg.Legs == nil || len(cfg.Media) == 0 {
		return nil, errors.New("controller: needs ICE, the legs and the media addresses")
	}
	if cfg.Codecs == (signaling.Codecs{}) {
		cfg.Codecs = signaling.DefaultCodecs
	}
	if cfg.TTL == 0 {
		cfg.TTL = 64
	}
	if cfg.MaxRooms == 0 {
		cfg.MaxRooms = 1000
	}
	if cfg.MaxParticipants == 0 {
		cfg.MaxParticipants = 500
	}
	video, ok := dataplane.VideoCodec(cfg.Codecs.Video)
	if !ok {
		return nil, fmt.Errorf("controller: video codec %q: the data plane finds key frames of AV1, VP8, VP9 and H264 only", cfg.Codecs.Video)
	}
	return &Controller{cfg: cfg, video: video, rooms: map[string]*room{}, conns: map[string]*conn{}}, nil
}

// Join puts a new participant in the grant's room; send gets its
// messages (called with the controller's lock held: it must not call
// back). It gets a receive-only offer for every stream already published
// there. A participant of the same identity already there is replaced (a
// browser rejoining before its old socket closed): it is told so and
// leaves.
func (c *Controller) Join(g access.Grant, send func(Message)) (*Participant, error) {
	if !access.ValidRoom(g.Room) {
		return nil, fmt.Errorf("controller: room name %q: 1 to 64 letters, digits, '-' or '_'", g.Room)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rooms[g.Room]
	if old := r.identity(g.Identity); old != nil {
		old.send(Message{Type: "replaced", Text: g.Identity + " joined again elsewhere"})
		c.leave(old)
		r = c.rooms[g.Room]
	}
	switch {
	case r == nil && len(c.rooms) >= c.cfg.MaxRooms:
		return nil, access.Refuse(access.Rooms, "the server has %d rooms, its most", len(c.rooms))
	case r != nil && len(r.parts) >= c.cfg.MaxParticipants:
		return nil, access.Refuse(access.RoomFull, "room %s has %d participants, its most", g.Room, len(r.parts))
	}
	if r == nil {
		r = &room{name: g.Room, parts: map[string]*Participant{}}
		c.rooms[g.Room] = r
	}
	p := &Participant{ID: randomString(8), grant: g, room: r, send: send, pubs: map[string]*publication{}, recv: map[string]*conn{}}
	r.parts[p.ID] = p
	joined := Message{Type: "joined", ID: p.ID, Name: p.name(), Media: map[bool]string{true: "encrypted", false: "plain"}[c.encrypted()],
		Simulcast: c.cfg.Simulcast}
	if c.cfg.ICEServers != nil {
		joined.ICEServers = c.cfg.ICEServers(cmp.Or(g.Identity, p.ID), time.Now())
	}
	send(joined)
	for _, other := range r.parts {
		if other != p {
			for _, pb := range other.pubs {
				c.offerStream(pb, p)
			}
		}
	}
	if r.speaker != "" {
		send(Message{Type: "speaker", ID: r.speaker})
	}
	return p, nil
}

// identity is the participant of this identity in r (none for open
// rooms' participants, which have none).
func (r *room) identity(id string) *Participant {
	if r == nil || id == "" {
		return nil
	}
	for _, p := range r.parts {
		if p.grant.Identity == id {
			return p
		}
	}
	return nil
}

// name is what the others see: the token's display name, else its
// identity.
func (p *Participant) name() string { return cmp.Or(p.grant.Name, p.grant.Identity) }

// Publish takes the participant's send-only offer for a source (camera:
// its camera and microphone; screen: a screen it shares, on a connection
// of its own) and answers it; every other participant in the room gets a
// receive-only offer for the stream.
func (c *Controller) Publish(p *Participant, source, offer string) error {
	source = cmp.Or(source, Camera)
	if source != Camera && source != Screen {
		return fmt.Errorf("controller: publish %q (want camera or screen)", source)
	}
	pub, err := signaling.ParsePublish(offer, c.cfg.Codecs)
	if err != nil {
		return err
	}
	if err := pub.Security.Check(c.encrypted(), true); err != nil {
		return err
	}
	if pub.Simulcast() && !c.cfg.Simulcast {
		return errors.New("controller: simulcast offered, and this SFU's data plane forwards one encoding (simulcast is --dataplane user's)")
	}
	if !p.grant.Publish {
		return errors.New("controller: this participant's token does not let it publish (a viewer)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.left {
		return errors.New("controller: this participant has left")
	}
	if p.pubs[source] != nil {
		return fmt.Errorf("controller: already publishing its %s (one send-only connection each)", source)
	}
	pb := &publication{id: streamID(p.ID, source), source: source, owner: p, publish: pub}
	pb.conn = c.newConn(p, pb)
	pb.conn.ice.RemoteUfrag = pub.RemoteUfrag
	pub.StartKbps = c.cfg.PublisherStartKbps
	answer, err := pub.Answer(c.ice(pb.conn))
	if err == nil {
		err = c.secure(pb.conn, pub.Security)
	}
	if err == nil {
		err = c.cfg.ICE.Add(pb.conn.ice)
	}
	if err != nil {
		c.dropConn(pb.conn)
		return err
	}
	p.pubs[source] = pb
	p.send(Message{Type: "answer", Source: source, SDP: answer})
	for _, other := range p.room.parts {
		if other != p {
			c.offerStream(pb, other)
		}
	}
	return nil
}

// Unpublish ends what p publishes of a source (it stopped sharing its
// screen): its stream, its connection, and every receiver's connection
// for it, whose pages are told (left).
func (c *Controller) Unpublish(p *Participant, source string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pb := p.pubs[cmp.Or(source, Camera)]
	if p.left || pb == nil {
		return fmt.Errorf("controller: unpublish: not publishing %q", source)
	}
	return c.unpublish(pb)
}

// Mute records that p has turned its microphone (kind audio) or camera
// (video) off or on, and tells the others in the room, whose pages show
// it; a receiver joining later learns it with the stream's offer. What
// stops is the browser's sending (the page stops its camera, and mutes
// its microphone's track): the SFU forwards what comes.
func (c *Controller) Mute(p *Participant, kind string, muted bool) error {
	if kind != "audio" && kind != "video" {
		return fmt.Errorf("controller: mute %q (want audio or video)", kind)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	camera := p.pubs[Camera]
	if p.left || camera == nil {
		return errors.New("controller: mute: not publishing")
	}
	p.muted = slices.DeleteFunc(p.muted, func(k string) bool { return k == kind })
	if muted {
		p.muted = append(p.muted, kind)
		slices.Sort(p.muted)
	} else if kind == "video" && camera.sender != nil {
		camera.sender.KeyFrame() // for the receivers that joined while it was off
	}
	for _, other := range p.room.parts {
		if other != p {
			other.send(Message{Type: "muted", ID: p.ID, Muted: slices.Clone(p.muted)})
		}
	}
	return nil
}

// Speaker tells everyone in the room who speaks now (its stream's id; ""
// when the speaker left and nobody speaks yet); the pages highlight it.
func (c *Controller) Speaker(room, stream string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rooms[room]
	if r == nil {
		return
	}
	r.speaker = stream
	for _, p := range r.parts {
		p.send(Message{Type: "speaker", ID: stream})
	}
}

// Answer takes a receiver's answer to the offer for a stream (its id):
// its ICE username fragment is what lets its checks in, and what it
// accepted (transport-cc, RTX) shapes its leg.
func (c *Controller) Answer(p *Participant, streamID, answer string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cn := p.recv[streamID]
	if cn == nil || p.left {
		return fmt.Errorf("controller: no offer for stream %q", streamID)
	}
	if cn.ice.RemoteUfrag != "" {
		return errors.New("controller: already answered")
	}
	a, err := cn.stream.publish.ParseReceiverAnswer(answer)
	if err != nil {
		return err
	}
	if err := a.Security.Check(c.encrypted(), false); err != nil {
		return err
	}
	if err := c.secure(cn, a.Security); err != nil {
		return err
	}
	cn.answer, cn.ice.RemoteUfrag = a, a.Ufrag
	if err := c.cfg.ICE.Add(cn.ice); err != nil {
		cn.ice.RemoteUfrag = "" // (it may answer again)
		c.dropSecurity(cn)
		return err
	}
	return nil
}

// Leave removes the participant: its stream, its place among every other
// stream's receivers, its connections' ICE sessions.
func (c *Controller) Leave(p *Participant) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leave(p)
}

// leave is Leave with the lock held; a participant leaves once.
func (c *Controller) leave(p *Participant) error {
	if p.left {
		return nil
	}
	p.left = true
	var errs []error
	for _, pb := range p.pubs {
		errs = append(errs, c.unpublish(pb))
	}
	for id, cn := range p.recv {
		c.dropConn(cn)
		delete(p.recv, id)
	}
	delete(p.room.parts, p.ID)
	for _, other := range p.room.parts {
		for _, pb := range other.pubs {
			errs = append(errs, c.updateLegs(pb))
		}
	}
	if len(p.room.parts) == 0 {
		delete(c.rooms, p.room.name)
	}
	return errors.Join(errs...)
}

// onBinding is the agent's report that a connection's checks come from
// this address: the data plane and the legs follow.
func (c *Controller) onBinding(cn *conn, b agent.Binding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn.dropped || cn.addr == b.Remote {
		return
	}
	cn.addr = b.Remote
	if cn.tr != nil {
		cn.tr.Connect(b.Remote) // (where the SFU is the DTLS client)
	}
	c.bound(cn)
}

// bound: cn's address or keys changed; the data plane and the legs
// follow (with encrypted media, once it has keys).
func (c *Controller) bound(cn *conn) {
	if !c.usable(cn) {
		return
	}
	c.protect(cn)
	if cn.sends() {
		_ = c.bindPublisher(cn.stream)
		return
	}
	_ = c.updateLegs(cn.stream)
}

// Expired: consent lapsed on these bindings (agent.ICE.Expire): their
// connections stop getting or sending media until checks come back.
func (c *Controller) Expired(bs []agent.Binding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bs {
		cn := c.conns[b.LocalUfrag]
		if cn == nil || cn.addr != b.Remote {
			continue
		}
		cn.addr = netip.AddrPort{}
		c.unprotect(cn)
		if cn.sends() {
			_ = cn.stream.closeSender()
			continue
		}
		_ = c.updateLegs(cn.stream)
	}
}

// bindPublisher installs pb's stream from its connection's address (a
// stream from an address it left goes), then its receivers' legs.
func (c *Controller) bindPublisher(pb *publication) error {
	_ = pb.closeSender()
	via, ok := c.mediaFor(pb.conn.addr)
	if !ok {
		return fmt.Errorf("controller: no media address of %v's family", pb.conn.addr)
	}
	cfg := leg.SenderConfig{Room: pb.owner.room.name, ID: pb.id, From: pb.conn.addr, Via: via}
	if pb.source == Screen {
		cfg.Priority = 1 // on a narrow link a receiver keeps the screen over cameras
	}
	for _, m := range pb.publish.Media {
		twcc := m.ExtensionID(signaling.TransportCCURI)
		for _, ssrc := range m.SSRCs {
			src := dataplane.Source{SSRC: ssrc, TWCCExt: twcc}
			if len(m.RIDs) > 0 { // its encodings' SSRCs are learnt: this one is the SFU's
				src.SSRC, src.Simulcast = 0, &dataplane.Simulcast{RIDExt: m.ExtensionID(signaling.RIDURI), RIDs: m.RIDs, SSRC: ssrc}
			}
			if m.Kind == "audio" && pb.source == Camera { // speakers (a screen's tab audio is none)
				src.LevelExt = m.ExtensionID(signaling.AudioLevelURI)
			}
			if m.Kind == "video" {
				// A history only where receivers may NACK: the data plane
				// writes it for every packet.
				src.Video, src.History, cfg.VideoSSRC = c.video, m.HasFeedback("nack"), ssrc
				if c.cfg.Adapt { // Chromium sends the descriptor with AV1, VP8 and VP9
					src.DDExt = m.ExtensionID(signaling.DependencyDescriptorURI)
				}
				src.RTX = publisherRTX(m)
			}
			cfg.Sources = append(cfg.Sources, src)
		}
	}
	s, err := c.cfg.Legs.AddSender(cfg)
	if err != nil {
		return err
	}
	pb.sender = s
	return c.updateLegs(pb)
}

// publisherRTX is the retransmission stream m's answer took, if any.
func publisherRTX(m *signaling.Media) *dataplane.RTX {
	if !m.PublisherRTX {
		return nil
	}
	rtx := &dataplane.RTX{PT: uint8(m.RTXPayloadType), MediaPT: uint8(m.PayloadType), SSRC: m.RTXSSRC}
	if len(m.RIDs) > 0 {
		rtx.SSRC, rtx.RRIDExt = 0, m.ExtensionID(signaling.RRIDURI)
	}
	return rtx
}

// updateLegs makes pb's stream go to every receiver bound now.
func (c *Controller) updateLegs(pb *publication) error {
	if pb.sender == nil {
		return nil
	}
	var legs []leg.LegConfig
	for _, other := range pb.owner.room.parts {
		cn := other.recv[pb.id]
		if other == pb.owner || cn == nil || !c.usable(cn) {
			continue
		}
		from, ok := c.mediaFor(cn.addr)
		if !ok || cn.addr.Addr().Is4() != pb.conn.addr.Addr().Is4() {
			continue // the data plane replicates within one family
		}
		legs = append(legs, c.legOf(pb, other, cn, from))
	}
	return pb.sender.SetLegs(legs)
}

// legOf is the leg of pb's stream to other, as other's answer negotiated it.
func (c *Controller) legOf(pb *publication, other *Participant, cn *conn, from netip.AddrPort) leg.LegConfig {
	lc := leg.LegConfig{Receiver: other.ID, From: from, To: cn.addr, TTL: c.cfg.TTL, TWCC: cn.answer.TWCC, Encrypted: c.encrypted()}
	id, send := pb.id, other.send
	lc.Notify = func(paused bool, why string) {
		m := Message{Type: "resumed", ID: id}
		if paused {
			m.Type, m.Reason = "paused", why
		}
		send(m)
	}
	for _, m := range pb.publish.Media {
		if m.Kind != "video" {
			continue
		}
		lc.TWCCExt = m.ExtensionID(signaling.TransportCCURI)
		if cn.answer.RTX {
			lc.RTX = &leg.RTX{PT: uint8(m.RTXPayloadType), SSRC: m.RTXSSRC}
		}
	}
	return lc
}

// Stream is a published stream as an observer sees it: where it comes
// from and which participant each receiver address belongs to.
type Stream struct {
	Room, Sender string
	From         netip.AddrPort
	Receivers    map[netip.AddrPort]string // receiver's address -> participant id
}

// Rooms are the participants in each room.
func (c *Controller) Rooms() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.rooms))
	for name, r := range c.rooms {
		out[name] = len(r.parts)
	}
	return out
}

// Streams are the streams the data plane carries now.
func (c *Controller) Streams() []Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Stream
	for _, r := range c.rooms {
		for _, p := range r.parts {
			for _, pb := range p.pubs {
				if pb.sender == nil {
					continue
				}
				st := Stream{Room: r.name, Sender: pb.id, From: pb.conn.addr, Receivers: map[netip.AddrPort]string{}}
				for _, other := range r.parts {
					if cn := other.recv[pb.id]; cn != nil && cn.addr.IsValid() {
						st.Receivers[cn.addr] = other.ID
					}
				}
				out = append(out, st)
			}
		}
	}
	return out
}

// mediaFor is the SFU's media address of the family of a.
func (c *Controller) mediaFor(a netip.AddrPort) (netip.AddrPort, bool) {
	for _, m := range c.cfg.Media {
		if m.Addr().Unmap().Is4() == a.Addr().Unmap().Is4() {
			return m, true
		}
	}
	return netip.AddrPort{}, false
}

// offerStream gives receiver a receive-only connection for pb's stream.
func (c *Controller) offerStream(pb *publication, receiver *Participant) {
	cn := c.newConn(receiver, pb)
	offer, err := pb.publish.ReceiverOffer(c.ice(cn))
	if err != nil {
		delete(c.conns, cn.ice.LocalUfrag)
		receiver.send(Message{Type: "error", Text: err.Error()})
		return
	}
	receiver.recv[pb.id] = cn
	publisher := pb.owner
	m := Message{Type: "offer", ID: pb.id, Owner: publisher.ID, Source: pb.source, Name: publisher.name(), SDP: offer}
	if pb.source == Camera {
		m.Muted = publisher.muted
	}
	receiver.send(m)
}

func (c *Controller) newConn(owner *Participant, stream *publication) *conn {
	cn := &conn{owner: owner, stream: stream,
		ice: agent.Session{LocalUfrag: randomString(8), LocalPwd: randomString(24)}}
	cn.ice.OnBinding = func(b agent.Binding) { c.onBinding(cn, b) }
	c.conns[cn.ice.LocalUfrag] = cn
	return cn
}

func (c *Controller) dropConn(cn *conn) {
	c.dropSecurity(cn)
	c.cfg.ICE.Remove(cn.ice.LocalUfrag)
	cn.dropped = true
	delete(c.conns, cn.ice.LocalUfrag)
}

func (c *Controller) ice(cn *conn) signaling.ICE {
	ice := signaling.ICE{Ufrag: cn.ice.LocalUfrag, Pwd: cn.ice.LocalPwd, Candidates: c.cfg.Media}
	if c.encrypted() {
		ice.Fingerprint = c.cfg.Security.Identity.Fingerprint()
	}
	return ice
}

// randomString is n characters of ICE's alphabet (RFC 8445 5.3: letters,
// digits, + and /) from crypto/rand: a guessed password would let a
// stranger's checks in.
func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawStdEncoding.EncodeToString(b)[:n]
}

// Snapshot lists the rooms and their participants for the admin endpoint
// (ebrtc top): who publishes from where, to how many, and receives how much.
func (c *Controller) Snapshot() []admin.Room {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]admin.Room, 0, len(c.rooms))
	for _, r := range c.rooms {
		room := admin.Room{Name: r.name}
		for _, p := range r.parts {
			ap := admin.Participant{ID: p.ID, Identity: p.grant.Identity, Name: p.name(), Viewer: !p.grant.Publish, Muted: slices.Clone(p.muted)}
			if camera := p.pubs[Camera]; camera != nil {
				if camera.sender != nil {
					ap.Receivers = len(camera.sender.Legs())
				}
				if camera.conn.addr.IsValid() {
					ap.Publishes = camera.conn.addr
				}
			}
			if screen := p.pubs[Screen]; screen != nil && screen.conn.addr.IsValid() {
				ap.Screen = screen.conn.addr
			}
			for _, cn := range p.recv {
				if cn.addr.IsValid() {
					ap.Receives++
				}
			}
			room.Participants = append(room.Participants, ap)
		}
		slices.SortFunc(room.Participants, func(a, b admin.Participant) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, room)
	}
	slices.SortFunc(out, func(a, b admin.Room) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
