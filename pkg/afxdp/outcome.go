package afxdp

import (
	"errors"

	"github.com/cilium/ebpf"
)

// Outcome is where the classifier sent a packet (enum rx_outcome in
// bpf/xsk_rx.h, same order).
type Outcome int

var outcomeNames = []string{
	"redirect",
	"pass_not_ip", "pass_not_udp", "pass_unregistered", "pass_not_unicast", "pass_other_host",
	"pass_vlan", "pass_ip_options", "pass_fragment", "pass_ipv6_ext_header", "pass_bad_length",
	"fallback_bad_ip_checksum", "fallback_zero_udp_checksum", "fallback_partial_checksum",
	"fallback_other_destination", "fallback_martian_source", "fallback_reverse_path",
	"fallback_oversize", "fallback_ring_full", "fallback_no_socket", "fallback_no_headroom",
	"fallback_other_interface",
}

const outcomeCount = uint32(22) // RX_OUT_MAX

func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Counter is packets and frame bytes.
type Counter struct{ Packets, Bytes uint64 }

// Stats are a conn's counters.
type Stats struct {
	// ViaXDP and ViaKernel count the datagrams ReadFrom returned from each path.
	ViaXDP, ViaKernel uint64
	// BadChecksum counts datagrams dropped for a wrong UDP checksum (as the
	// kernel drops them); Malformed frames without valid metadata.
	BadChecksum, Malformed uint64
	// Outcomes are the classifier's for the conn's port (nonzero only).
	Outcomes map[string]Counter
	// Sockets sums the kernel's counters of the AF_XDP sockets the conn
	// receives from (shared with the other conns on their interfaces).
	Sockets SocketStats
	// Mode is the sockets' binding, "copy" or "zero-copy"; XDPMode the
	// classifier's attachment, "native" or "generic" (by interface).
	Mode    string
	XDPMode map[string]string
	// Sent counts what the conn sent (WriteBatch, WriteTo), by path.
	Sent SendStats
}

// SocketStats are AF_XDP socket counters (XDP_STATISTICS) and the
// dispatchers' own.
type SocketStats struct {
	RxDropped, RxInvalid, RxRingFull, FillRingEmpty uint64
	Orphans                                         uint64 // frames for a port no conn held any more
}

// Stats reads the conn's counters.
func (c *Conn) Stats() (Stats, error) {
	st := Stats{ViaXDP: c.viaXDP.Load(), ViaKernel: c.viaKernel.Load(), BadChecksum: c.badChecksum.Load(),
		Malformed: c.malformed.Load(), XDPMode: map[string]string{}, Sent: c.tx.sendStats()}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return st, errors.New("afxdp: conn closed")
	}
	var errs []error
	var err error
	if st.Outcomes, err = readOutcomes(c.ns.objs.RxPortCounts, c.slot*outcomeCount); err != nil {
		errs = append(errs, err)
	}
	for _, it := range c.ifaces {
		st.XDPMode[it.name] = it.xdpMode
		for _, q := range it.queues {
			st.Mode = q.sock.Mode().String()
			s, err := q.stats()
			errs = append(errs, err)
			st.Sockets.RxDropped += s.RxDropped
			st.Sockets.RxInvalid += s.RxInvalid
			st.Sockets.RxRingFull += s.RxRingFull
			st.Sockets.FillRingEmpty += s.FillRingEmpty
			st.Sockets.Orphans += q.orphans.Load()
		}
	}
	return st, errors.Join(errs...)
}

// NamespaceOutcomes are the classifier's counts for every packet it saw in
// the calling thread's namespace, by outcome; nil if no conn is open there.
func NamespaceOutcomes() (map[string]Counter, error) {
	id, err := currentNamespace()
	if err != nil {
		return nil, err
	}
	namespaces.Lock()
	ns := namespaces.m[id]
	namespaces.Unlock()
	if ns == nil {
		return nil, nil
	}
	return readOutcomes(ns.objs.RxOutcomes, 0)
}

// readOutcomes sums the per-CPU counters of the outcomes from key base on.
func readOutcomes(m *ebpf.Map, base uint32) (map[string]Counter, error) {
	out := map[string]Counter{}
	for o := range outcomeCount {
		var perCPU []xskrxRxCounter
		if err := m.Lookup(base+o, &perCPU); err != nil {
			return nil, err
		}
		var sum Counter
		for _, v := range perCPU {
			sum.Packets += v.Packets
			sum.Bytes += v.Bytes
		}
		if sum.Packets > 0 {
			out[Outcome(o).String()] = sum
		}
	}
	return out, nil
}
