package testbed

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"
)

// PionPeer is a pion/webrtc peer whose ICE runs on conn as its UDP mux
// (one host candidate: conn's address), of one network type, without mDNS.
func PionPeer(conn net.PacketConn, network webrtc.NetworkType) (*webrtc.PeerConnection, error) {
	var se webrtc.SettingEngine
	se.SetICEUDPMux(webrtc.NewICEUDPMux(nil, conn))
	se.SetNetworkTypes([]webrtc.NetworkType{network})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	var me webrtc.MediaEngine
	if err := me.RegisterDefaultCodecs(); err != nil {
		return nil, err
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(&me)).NewPeerConnection(webrtc.Configuration{})
}

// ConnectPeers does offer/answer between two peers of this process (full
// ICE gathering first: no trickle).
func ConnectPeers(offerer, answerer *webrtc.PeerConnection) error {
	offer, err := Describe(offerer, Offer)
	if err != nil {
		return fmt.Errorf("offer: %w", err)
	}
	if err := answerer.SetRemoteDescription(*offer); err != nil {
		return fmt.Errorf("offer: %w", err)
	}
	answer, err := Describe(answerer, Answer)
	if err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	if err := offerer.SetRemoteDescription(*answer); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// Offer and Answer create a peer's description, for Describe.
func Offer(pc *webrtc.PeerConnection) (webrtc.SessionDescription, error) { return pc.CreateOffer(nil) }
func Answer(pc *webrtc.PeerConnection) (webrtc.SessionDescription, error) {
	return pc.CreateAnswer(nil)
}

// Describe creates pc's description, sets it, and returns it once ICE has
// gathered (no trickle).
func Describe(pc *webrtc.PeerConnection, create func(*webrtc.PeerConnection) (webrtc.SessionDescription, error)) (*webrtc.SessionDescription, error) {
	d, err := create(pc)
	if err != nil {
		return nil, err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(d); err != nil {
		return nil, err
	}
	select {
	case <-gathered:
	case <-time.After(10 * time.Second):
		return nil, errors.New("ICE gathering not complete after 10 s")
	}
	return pc.LocalDescription(), nil
}
