package metrics

// The directions of relayed traffic, as every TURN metric labels them.
const (
	ClientToPeer = "client_to_peer"
	PeerToClient = "peer_to_client"
)
