package afxdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/egress"
	"github.com/ebrtc/ebrtc/internal/forwarding"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/slots"
)

// Sizes shared with bpf/xsk_rx.h.
const (
	xskSlots    = 256
	portSlots   = 1024
	frameSize   = 2048
	metaVersion = 1
)

// struct rx_meta (bpf/xsk_rx.h), in front of the UDP header.
const (
	metaSize    = 32
	metaAddr    = 0  // sender address: 4 or 16 bytes
	metaArrival = 16 // u64, CLOCK_MONOTONIC ns
	metaPseudo  = 24 // u16, folded pseudo-header sum
	metaFamily  = 26 // AF_INET or AF_INET6
	metaVer     = 27 // metaVersion
)

// metaOK says a frame carries the classifier's metadata and a UDP header.
func metaOK(frame []byte) bool { return len(frame) >= metaSize+8 && frame[metaVer] == metaVersion }

// namespace is what the conns of one network namespace share: the loaded
// classifier and its maps, the interfaces it is attached to (with their
// sockets), and the registered ports. It is loaded with the first conn and
// removed with the last.
type namespace struct {
	id      uint64            // the namespace's inode
	egress  *egress.Namespace // WriteBatch's route and egress questions are asked there
	objs    xskrxObjects
	credits []byte // rx_credits, mmapped: one int64 per XSK slot
	restore func() error

	mu     sync.Mutex
	refs   int
	ifaces map[int]*iface
	ports  map[xskrxRxPortKey]*Conn
	pslots slots.Pool
	xslots [xskSlots]bool // XSK slots in use
	ids    [64]bool       // interface ids in use (bits of rx_port.ifaces)

	// byPort is ports for the dispatchers, replaced (not changed) under mu.
	byPort atomic.Pointer[map[xskrxRxPortKey]*Conn]
}

var namespaces = struct {
	sync.Mutex
	m map[uint64]*namespace
}{m: map[uint64]*namespace{}}

// currentNamespace is the calling thread's network namespace, by inode.
func currentNamespace() (uint64, error) {
	fi, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("afxdp: network namespace: %w", err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

// acquireNamespace returns the calling thread's namespace state, loading
// the classifier for its first conn.
func acquireNamespace() (*namespace, error) {
	id, err := currentNamespace()
	if err != nil {
		return nil, err
	}
	namespaces.Lock()
	defer namespaces.Unlock()
	if ns := namespaces.m[id]; ns != nil {
		ns.mu.Lock()
		ns.refs++
		ns.mu.Unlock()
		return ns, nil
	}
	ns, err := loadNamespace(id)
	if err != nil {
		return nil, err
	}
	ns.refs = 1
	namespaces.m[id] = ns
	return ns, nil
}

func loadNamespace(id uint64) (ns *namespace, err error) {
	ns = &namespace{id: id, ifaces: map[int]*iface{}, ports: map[xskrxRxPortKey]*Conn{}, pslots: slots.New(portSlots)}
	ns.byPort.Store(&map[xskrxRxPortKey]*Conn{})
	spec, err := loadXskrx()
	if err != nil {
		return nil, fmt.Errorf("afxdp: classifier: %w", err)
	}
	if err := spec.Variables["rx_frame_max"].Set(uint32(frameSize - unix.XDP_PACKET_HEADROOM)); err != nil {
		return nil, fmt.Errorf("afxdp: classifier: %w", err)
	}
	if err := spec.LoadAndAssign(&ns.objs, nil); err != nil {
		return nil, fmt.Errorf("afxdp: load classifier: %w", err)
	}
	defer func() {
		if err != nil {
			ns.close()
		}
	}()
	ns.credits, err = unix.Mmap(ns.objs.RxCredits.FD(), 0, xskSlots*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("afxdp: map credits: %w", err)
	}
	if ns.egress, err = egress.CurrentNamespace(); err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	// The route lookups (local destination, reverse path) ask as if from
	// loopback, which must forward for bpf_fib_lookup to answer.
	if ns.restore, err = forwarding.Enable("lo"); err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	return ns, nil
}

func (ns *namespace) close() error {
	var errs []error
	if ns.credits != nil {
		errs = append(errs, unix.Munmap(ns.credits))
		ns.credits = nil
	}
	if ns.restore != nil {
		errs = append(errs, ns.restore())
	}
	if ns.egress != nil {
		errs = append(errs, ns.egress.Close())
	}
	errs = append(errs, ns.objs.Close())
	return errors.Join(errs...)
}

// release drops a conn's reference; the last one removes the classifier.
func (ns *namespace) release() error {
	namespaces.Lock()
	defer namespaces.Unlock()
	ns.mu.Lock()
	ns.refs--
	last := ns.refs == 0
	ns.mu.Unlock()
	if !last {
		return nil
	}
	delete(namespaces.m, ns.id)
	return ns.close()
}

// credit is the XSK slot's fill-ring credit in the classifier's map.
func (ns *namespace) credit(slot uint32) *int64 {
	return (*int64)(unsafe.Pointer(&ns.credits[slot*8]))
}

// conn is the conn registered for port and family, for a dispatcher.
func (ns *namespace) conn(port uint16, family uint8) *Conn {
	return (*ns.byPort.Load())[xskrxRxPortKey{Port: port, Family: family}]
}

func (ns *namespace) publishPorts() {
	m := make(map[xskrxRxPortKey]*Conn, len(ns.ports))
	for k, c := range ns.ports {
		m[k] = c
	}
	ns.byPort.Store(&m)
}

// binding is a port of one family as the classifier knows it.
type binding struct {
	key  xskrxRxPortKey
	port xskrxRxPort
}

// register puts c's bindings in the classifier, on interfaces it holds by then.
func (ns *namespace) register(c *Conn, bs []binding) (err error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, b := range bs {
		if ns.ports[b.key] != nil {
			return fmt.Errorf("afxdp: port %d (family %d) already has a conn in this namespace", b.key.Port, b.key.Family)
		}
	}
	slot, ok := ns.pslots.Get()
	if !ok {
		return fmt.Errorf("afxdp: more than %d ports", portSlots)
	}
	if err := ns.zeroPortCounters(slot); err != nil {
		ns.pslots.Put(slot)
		return err
	}
	c.slot = slot
	for _, b := range bs {
		b.port.Slot = slot
		if err := ns.objs.RxPorts.Put(b.key, b.port); err != nil {
			ns.removeKeys(c)
			ns.pslots.Put(slot)
			return fmt.Errorf("afxdp: register port %d: %w", b.key.Port, err)
		}
		ns.ports[b.key] = c
		c.keys = append(c.keys, b.key)
	}
	ns.publishPorts()
	return nil
}

// unregister takes c's port out: the classifier passes its datagrams to
// the kernel socket from then on.
func (ns *namespace) unregister(c *Conn) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if len(c.keys) == 0 {
		return nil
	}
	err := ns.removeKeys(c)
	ns.pslots.Put(c.slot)
	ns.publishPorts()
	return err
}

func (ns *namespace) removeKeys(c *Conn) error {
	var errs []error
	for _, k := range c.keys {
		errs = append(errs, ns.objs.RxPorts.Delete(k))
		delete(ns.ports, k)
	}
	c.keys = nil
	return errors.Join(errs...)
}

func (ns *namespace) zeroPortCounters(slot uint32) error {
	zero := make([]xskrxRxCounter, ebpf.MustPossibleCPU())
	for o := range outcomeCount {
		if err := ns.objs.RxPortCounts.Put(slot*outcomeCount+uint32(o), zero); err != nil {
			return fmt.Errorf("afxdp: zero port counters: %w", err)
		}
	}
	return nil
}

// iface is the classifier attached to one interface, with a socket per RX queue.
type iface struct {
	index   int
	id      uint32 // its bit in rx_port.ifaces
	name    string
	refs    int
	link    link.Link
	xdpMode string // "native" or "generic"
	queues  []*queue
}

// acquireIface attaches the classifier to the named interface for its
// first conn, opening a socket on each RX queue first.
func (ns *namespace) acquireIface(name string, cfg *ListenConfig) (_ *iface, err error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("afxdp: interface %q: %w", name, err)
	}
	if it := ns.ifaces[ifi.Index]; it != nil {
		it.refs++
		return it, nil
	}
	if ifi.Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("afxdp: %s is a loopback interface, which has no XDP driver hook", name)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afxdp: %s is not an Ethernet interface", name)
	}
	nq, err := netns.RXQueues(name)
	if err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	base, ok := ns.takeXSKSlots(nq)
	if !ok {
		return nil, fmt.Errorf("afxdp: no room for %d more sockets (at most %d)", nq, xskSlots)
	}
	id, ok := ns.takeID()
	if !ok {
		ns.freeXSKSlots(base, nq)
		return nil, fmt.Errorf("afxdp: more than %d interfaces", len(ns.ids))
	}
	it := &iface{index: ifi.Index, id: id, name: name, refs: 1}
	defer func() {
		if err != nil {
			ns.teardown(it)
			ns.freeXSKSlots(base, nq)
			ns.ids[id] = false
		}
	}()
	for q := range nq {
		qu, err := openQueue(ns, ifi.Index, q, base+uint32(q), nq == 1, cfg)
		if err != nil {
			return nil, fmt.Errorf("afxdp: %s queue %d: %w", name, q, err)
		}
		it.queues = append(it.queues, qu)
	}
	var mac [6]uint8
	copy(mac[:], ifi.HardwareAddr)
	if err := ns.objs.RxIfaces.Put(uint32(ifi.Index), xskrxRxIface{Mac: mac, Queues: uint16(nq), XskBase: base, Id: id}); err != nil {
		return nil, fmt.Errorf("afxdp: %s: %w", name, err)
	}
	if it.link, it.xdpMode, err = attachXDP(ns.objs.XskRx, ifi.Index); err != nil {
		return nil, fmt.Errorf("afxdp: attach XDP to %s: %w", name, err)
	}
	ns.ifaces[ifi.Index] = it
	return it, nil
}

// attachXDP attaches in driver mode, or generic mode where the driver has
// no XDP. An interface that already runs an XDP program is an error: the
// hook takes one, and that one is another program's.
func attachXDP(prog *ebpf.Program, ifindex int) (link.Link, string, error) {
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err == nil {
		return l, "native", nil
	}
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
		return nil, "", fmt.Errorf("the interface already runs an XDP program (ip link show; bpftool net): %w", err)
	}
	l, gerr := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPGenericMode})
	if gerr != nil {
		return nil, "", errors.Join(err, gerr)
	}
	return l, "generic", nil
}

// ensureRunners has a goroutine consume each of its queues that readers
// would otherwise poll: a conn on several queues cannot poll them all.
func (ns *namespace) ensureRunners(it *iface) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, q := range it.queues {
		q.startRunner()
	}
}

// releaseIface drops a conn's reference; the last one detaches.
func (ns *namespace) releaseIface(it *iface) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	it.refs--
	if it.refs > 0 {
		return nil
	}
	delete(ns.ifaces, it.index)
	ns.ids[it.id] = false
	err := ns.teardown(it)
	if len(it.queues) > 0 {
		ns.freeXSKSlots(it.queues[0].slot, len(it.queues))
	}
	return err
}

// teardown detaches first (no new redirects), then retires the sockets.
func (ns *namespace) teardown(it *iface) error {
	var errs []error
	if it.link != nil {
		errs = append(errs, it.link.Close())
	}
	if err := ns.objs.RxIfaces.Delete(uint32(it.index)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	for _, q := range it.queues {
		errs = append(errs, q.close())
	}
	return errors.Join(errs...)
}

// takeID reserves an interface id.
func (ns *namespace) takeID() (uint32, bool) {
	for i, used := range ns.ids {
		if !used {
			ns.ids[i] = true
			return uint32(i), true
		}
	}
	return 0, false
}

// takeXSKSlots reserves n consecutive XSK slots (an interface's queues).
func (ns *namespace) takeXSKSlots(n int) (uint32, bool) {
	for base := 0; base+n <= xskSlots; base++ {
		free := true
		for i := base; i < base+n && free; i++ {
			free = !ns.xslots[i]
		}
		if free {
			for i := base; i < base+n; i++ {
				ns.xslots[i] = true
			}
			return uint32(base), true
		}
	}
	return 0, false
}

func (ns *namespace) freeXSKSlots(base uint32, n int) {
	for i := int(base); i < int(base)+n; i++ {
		ns.xslots[i] = false
	}
}
