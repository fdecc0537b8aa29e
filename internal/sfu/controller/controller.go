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
	Type string `json:"type"`           // joined, answer, offer, left, paused, resumed, muted, replaced, error
	ID   string `json:"id,omitempty"`   // joined: yours; offer, left, paused, resumed, muted: the publisher's
	Name string `json:"name,omitempty"` // joined: yours; offer: the publisher's (its token's display name)
	// Token (joined) is a join token for rejoining (a reload): each token
	// joins once.
	Token string `json:"token,omitempty"`
	// Muted (offer, muted) are the kinds the publisher has turned off
	// (audio: its microphone muted; video: its camera off).
	Muted []string `json:"muted,omitempty"`
	SDP   string   `json:"sdp,omitempty"`  // answer, offer
	Text  string   `json:"text,omitempty"` // error
	// Media is how media travels in the room (joined): "encrypted"
	// (DTLS-SRTP) or "plain" (--unencrypted-media).
	Media string `json:"media,omitempty"`
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
	// Security, if set, makes media encrypted (DTLS-SRTP on every
	// connection, secure.go); nil: plain RTP (--unencrypted-media).
	Security *Security
	// MaxRooms and MaxParticipants bound the rooms and each room's
	// participants (0: 1,000 rooms, 500 participants a room); a join
	// past them is refused (access.Rooms, access.RoomFull).
	MaxRooms, MaxParticipants int
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
	name  string
	parts map[string]*Participant
}

// Participant is one browser in a room.
type Participant struct {
	ID    string
	grant access.Grant // who it is and whether it may publish
	room  *room
	send  func(Message)
	left  bool     // Leave ran (or a newer join of its identity replaced it)
	muted []string // the kinds it has turned off, sorted (Mute)

	publish *signaling.Publish
	pub     *conn            // its send-only connection
	sender  *leg.Sender      // its stream, once its connection is bound
	recv    map[string]*conn // its receive-only connections, by publisher id
}

// conn is one PeerConnection between a browser and the SFU.
type conn struct {
	owner     *Participant
	publisher *Participant // for a receive-only connection: whose stream
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
	p := &Participant{ID: randomString(8), grant: g, room: r, send: send, recv: map[string]*conn{}}
	r.parts[p.ID] = p
	send(Message{Type: "joined", ID: p.ID, Name: p.name(), Media: map[bool]string{true: "encrypted", false: "plain"}[c.encrypted()]})
	for _, other := range r.parts {
		if other != p && other.publish != nil {
			c.offerStream(other, p)
		}
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

// Publish takes the participant's send-only offer and answers it; every
// other participant in the room gets a receive-only offer for it.
func (c *Controller) Publish(p *Participant, offer string) error {
	pub, err := signaling.ParsePublish(offer, c.cfg.Codecs)
	if err != nil {
		return err
	}
	if err := pub.Security.Check(c.encrypted(), true); err != nil {
		return err
	}
	if !p.grant.Publish {
		return errors.New("controller: this participant's token does not let it publish (a viewer)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.left {
		return errors.New("controller: this participant has left")
	}
	if p.publish != nil {
		return errors.New("controller: already publishing (one send-only connection per participant)")
	}
	cn := c.newConn(p, nil)
	cn.ice.RemoteUfrag = pub.RemoteUfrag
	answer, err := pub.Answer(c.ice(cn))
	if err == nil {
		err = c.secure(cn, pub.Security)
	}
	if err == nil {
		err = c.cfg.ICE.Add(cn.ice)
	}
	if err != nil {
		c.dropConn(cn)
		return err
	}
	p.publish, p.pub = pub, cn
	p.send(Message{Type: "answer", SDP: answer})
	for _, other := range p.room.parts {
		if other != p {
			c.offerStream(p, other)
		}
	}
	return nil
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
	if p.left || p.publish == nil {
		return errors.New("controller: mute: not publishing")
	}
	p.muted = slices.DeleteFunc(p.muted, func(k string) bool { return k == kind })
	if muted {
		p.muted = append(p.muted, kind)
		slices.Sort(p.muted)
	} else if kind == "video" && p.sender != nil {
		p.sender.KeyFrame() // for the receivers that joined while it was off
	}
	for _, other := range p.room.parts {
		if other != p {
			other.send(Message{Type: "muted", ID: p.ID, Muted: slices.Clone(p.muted)})
		}
	}
	return nil
}

// Answer takes a receiver's answer to the offer for publisher's stream:
// its ICE username fragment is what lets its checks in, and what it
// accepted (transport-cc, RTX) shapes its leg.
func (c *Controller) Answer(p *Participant, publisherID, answer string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cn := p.recv[publisherID]
	if cn == nil || p.left {
		return fmt.Errorf("controller: no offer for %q's stream", publisherID)
	}
	if cn.ice.RemoteUfrag != "" {
		return errors.New("controller: already answered")
	}
	a, err := cn.publisher.publish.ParseReceiverAnswer(answer)
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
	if p.sender != nil {
		errs = append(errs, p.sender.Close())
		p.sender = nil
	}
	if p.pub != nil {
		c.dropConn(p.pub)
	}
	for _, cn := range p.recv {
		c.dropConn(cn)
	}
	for _, other := range p.room.parts {
		if cn := other.recv[p.ID]; cn != nil {
			c.dropConn(cn)
			delete(other.recv, p.ID)
		}
	}
	delete(p.room.parts, p.ID)
	for _, other := range p.room.parts {
		if p.publish != nil {
			other.send(Message{Type: "left", ID: p.ID})
		}
		errs = append(errs, c.updateLegs(other))
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
	if cn.publisher == nil {
		_ = c.bindPublisher(cn.owner)
		return
	}
	_ = c.updateLegs(cn.publisher)
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
		if cn.publisher == nil {
			if p := cn.owner; p.sender != nil {
				_ = p.sender.Close()
				p.sender = nil
			}
			continue
		}
		_ = c.updateLegs(cn.publisher)
	}
}

// bindPublisher installs p's stream from its connection's address (a
// stream from an address it left goes), then its receivers' legs.
func (c *Controller) bindPublisher(p *Participant) error {
	if p.sender != nil {
		_ = p.sender.Close()
		p.sender = nil
	}
	via, ok := c.mediaFor(p.pub.addr)
	if !ok {
		return fmt.Errorf("controller: no media address of %v's family", p.pub.addr)
	}
	cfg := leg.SenderConfig{Room: p.room.name, ID: p.ID, From: p.pub.addr, Via: via}
	for _, m := range p.publish.Media {
		twcc := m.ExtensionID(signaling.TransportCCURI)
		for _, ssrc := range m.SSRCs {
			src := dataplane.Source{SSRC: ssrc, TWCCExt: twcc}
			if m.Kind == "video" {
				// A history only where receivers may NACK: the data plane
				// writes it for every packet.
				src.Video, src.History, cfg.VideoSSRC = c.video, m.HasFeedback("nack"), ssrc
				if c.cfg.Adapt { // Chromium sends the descriptor with AV1, VP8 and VP9
					src.DDExt = m.ExtensionID(signaling.DependencyDescriptorURI)
				}
			}
			cfg.Sources = append(cfg.Sources, src)
		}
	}
	s, err := c.cfg.Legs.AddSender(cfg)
	if err != nil {
		return err
	}
	p.sender = s
	return c.updateLegs(p)
}

// updateLegs makes p's stream go to every receiver bound now.
func (c *Controller) updateLegs(p *Participant) error {
	if p.sender == nil {
		return nil
	}
	var legs []leg.LegConfig
	for _, other := range p.room.parts {
		cn := other.recv[p.ID]
		if other == p || cn == nil || !c.usable(cn) {
			continue
		}
		from, ok := c.mediaFor(cn.addr)
		if !ok || cn.addr.Addr().Is4() != p.pub.addr.Addr().Is4() {
			continue // the data plane replicates within one family
		}
		legs = append(legs, c.legOf(p, other, cn, from))
	}
	return p.sender.SetLegs(legs)
}

// legOf is the leg of p's stream to other, as other's answer negotiated it.
func (c *Controller) legOf(p, other *Participant, cn *conn, from netip.AddrPort) leg.LegConfig {
	lc := leg.LegConfig{Receiver: other.ID, From: from, To: cn.addr, TTL: c.cfg.TTL, TWCC: cn.answer.TWCC, Encrypted: c.encrypted()}
	publisher, send := p.ID, other.send
	lc.Notify = func(paused bool) {
		t := "resumed"
		if paused {
			t = "paused"
		}
		send(Message{Type: t, ID: publisher})
	}
	for _, m := range p.publish.Media {
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
			if p.sender == nil {
				continue
			}
			st := Stream{Room: r.name, Sender: p.ID, From: p.pub.addr, Receivers: map[netip.AddrPort]string{}}
			for _, other := range r.parts {
				if cn := other.recv[p.ID]; cn != nil && cn.addr.IsValid() {
					st.Receivers[cn.addr] = other.ID
				}
			}
			out = append(out, st)
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

// offerStream gives receiver a receive-only connection for publisher's stream.
func (c *Controller) offerStream(publisher, receiver *Participant) {
	cn := c.newConn(receiver, publisher)
	offer, err := publisher.publish.ReceiverOffer(c.ice(cn))
	if err != nil {
		delete(c.conns, cn.ice.LocalUfrag)
		receiver.send(Message{Type: "error", Text: err.Error()})
		return
	}
	receiver.recv[publisher.ID] = cn
	receiver.send(Message{Type: "offer", ID: publisher.ID, Name: publisher.name(), SDP: offer, Muted: publisher.muted})
}

func (c *Controller) newConn(owner, publisher *Participant) *conn {
	cn := &conn{owner: owner, publisher: publisher,
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
			if p.sender != nil {
				ap.Receivers = len(p.sender.Legs())
			}
			if p.pub != nil && p.pub.addr.IsValid() {
				ap.Publishes = p.pub.addr
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
