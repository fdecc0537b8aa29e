package offload

// Outcome is what the data plane did with one packet. The order mirrors
// enum outcome in bpf/outcome.h; TestOutcomeListMatchesBPF keeps them in sync.
type Outcome uint32

const (
	FastClientToPeer Outcome = iota
	FastPeerToClient
	FastHairpin
	PassNotIP
	PassNotUDP
	PassNotTURN
	PassOtherHost
	SlowVLAN
	SlowIPOptions
	SlowFragment
	SlowIPv6ExtHeader
	SlowBadLength
	SlowBadIPChecksum
	SlowZeroUDPChecksum
	SlowNotChannelData
	SlowUnknownChannel
	SlowChannelLength
	SlowUnknownPeer
	SlowMartianSource
	SlowReversePath
	SlowFIBNoNeighbour
	SlowFIBFragNeeded
	SlowFIBOther
	SlowNoEgressPort
	SlowNoHeadroom
	SlowSpill
	SlowGSO
	SlowNonlinear
	SlowChecksumOffload
	DropRewriteFailed
	DropRateLimit
	DropXmitFailed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"fast_client_to_peer", "fast_peer_to_client", "fast_hairpin",
	"pass_not_ip", "pass_not_udp", "pass_not_turn", "pass_other_host",
	"vlan", "ip_options", "fragment", "ipv6_ext_header", "bad_length", "bad_ip_checksum",
	"zero_udp_checksum", "not_channel_data", "unknown_channel", "channel_length", "unknown_peer",
	"martian_source", "reverse_path", "fib_no_neighbour", "fib_frag_needed", "fib_other", "no_egress_port", "no_headroom", "spill",
	"gso", "nonlinear", "checksum_offload",
	"drop_rewrite_failed", "drop_rate_limit", "drop_xmit_failed",
}

// Outcomes lists every outcome in order.
func Outcomes() []Outcome {
	all := make([]Outcome, numOutcomes)
	for i := range all {
		all[i] = Outcome(i)
	}
	return all
}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// IsSlow reports whether TURN (or unparseable) traffic was handed to user space.
func (o Outcome) IsSlow() bool { return o >= SlowVLAN && o <= SlowChecksumOffload }

// IsDrop reports whether the data plane dropped the packet.
func (o Outcome) IsDrop() bool { return o >= DropRewriteFailed && o < numOutcomes }

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// FastByDirection folds the fast outcomes into the two directions: a hairpin
// is one client-to-peer and one peer-to-client relay, as user space counts it.
func FastByDirection(o map[Outcome]Counter) (toPeer, toClient Counter) {
	add := func(a, b Counter) Counter {
		return Counter{Packets: a.Packets + b.Packets, Bytes: a.Bytes + b.Bytes}
	}
	hp := o[FastHairpin]
	return add(o[FastClientToPeer], hp), add(o[FastPeerToClient], hp)
}
