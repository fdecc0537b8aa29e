package offload

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/forwarding"
)

// Mode says which hooks carry the fast path on an interface.
type Mode string

const (
	// ModeAuto: TC ingress everywhere, and native XDP in front of it where
	// XDP frames are delivered (see xdpDelivers); XDP hands what it cannot
	// send to TC. Never generic XDP.
	ModeAuto Mode = "auto"
	// ModeXDP: native XDP only; the operator vouches that every egress takes XDP frames.
	ModeXDP Mode = "xdp"
	// ModeTC: TC ingress only.
	ModeTC Mode = "tc"
)

// ParseMode reads a --offload value other than "off".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeXDP, ModeTC:
		return m, nil
	}
	return "", fmt.Errorf("%q is not auto, xdp, tc or off", s)
}

// Attachment says how the fast path runs on one interface, and why.
type Attachment struct {
	Iface     string
	Index     int
	XDP       bool // the native XDP program runs here
	TC        bool // the TC ingress program runs here
	XDPEgress bool // frames sent here from XDP (XDP_TX, redirect) are delivered
	Pinned    bool // taken over from a previous run
	Reason    string

	slot uint32 // in xmit_pending (bpf/turn.h)
}

// Hooks is "xdp", "tc" or "xdp+tc".
func (a Attachment) Hooks() string {
	switch {
	case a.XDP && a.TC:
		return "xdp+tc"
	case a.XDP:
		return "xdp"
	}
	return "tc"
}

type attachment struct {
	Attachment
	links   map[string]link.Link // by pin name
	created []link.Link          // pinned by this run (unpinned if the attach fails)
}

// Attach runs the fast path on an interface in the given mode and allows
// redirects to it. With manageForwarding it turns on the loopback
// forwarding sysctls that bpf_fib_lookup needs (bpf/ip.h) until Close;
// without, it fails when they are off. The programs learn the interface's
// hooks before they run there; on failure nothing of it is left behind.
func (e *Engine) Attach(ifname string, mode Mode, manageForwarding bool) (Attachment, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return Attachment{}, fmt.Errorf("offload: interface %q: %w", ifname, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.attached[iface.Index]; ok {
		return Attachment{}, fmt.Errorf("offload: already attached to %s", ifname)
	}
	if err := e.lookupForwarding(manageForwarding); err != nil {
		return Attachment{}, err
	}
	slot, ok := e.ifaceSlots.Get()
	if !ok {
		return Attachment{}, fmt.Errorf("offload: %s: more than %d interfaces", ifname, maxIfaceSlots)
	}
	a := &attachment{Attachment: Attachment{Iface: ifname, Index: iface.Index, slot: slot}, links: map[string]link.Link{}}
	fail := func(err error) (Attachment, error) {
		a.abandon()
		_ = e.objs.Ifaces.Delete(uint32(iface.Index))
		e.bumpIfaceGen()
		e.ifaceSlots.Put(slot)
		return Attachment{}, err
	}
	if err := e.attachHooks(a, iface, mode); err != nil {
		return fail(fmt.Errorf("offload: %s: %w", ifname, err))
	}
	if err := e.objs.EgressPorts.Put(uint32(iface.Index), uint32(iface.Index)); err != nil {
		return fail(fmt.Errorf("offload: add %s to egress ports: %w", ifname, err))
	}
	e.attached[iface.Index] = a
	return a.Attachment, nil
}

func (e *Engine) lookupForwarding(manage bool) error {
	if e.forwardingOn {
		return nil
	}
	if !manage {
		if !forwarding.Enabled("lo") {
			return errors.New("offload: lo does not forward (net.ipv4/ipv6.conf.lo.forwarding); the fast path's route lookups need it")
		}
		e.forwardingOn = true
		return nil
	}
	restore, err := forwarding.Enable("lo")
	if err != nil {
		return err
	}
	e.restores = append(e.restores, restore)
	e.forwardingOn = true
	return nil
}

func (e *Engine) attachHooks(a *attachment, iface *net.Interface, mode Mode) error {
	switch mode {
	case ModeTC:
		a.TC, a.Reason = true, "tc requested"
	case ModeXDP:
		a.XDP, a.XDPEgress, a.Reason = true, true, "xdp requested"
	case ModeAuto, "":
		a.TC = true
		a.XDP, a.Reason = xdpDelivers(iface.Index)
		a.XDPEgress = a.XDP
	default:
		return fmt.Errorf("unknown offload mode %q", mode)
	}
	if err := e.registerIface(a.Attachment, iface.HardwareAddr); err != nil {
		return err
	}
	// A pinned hook of an earlier run that this one does not choose would
	// go on running the old program: detach it.
	if !a.TC {
		e.dropPinnedLink("tc_ingress_" + iface.Name)
	}
	if !a.XDP {
		e.dropPinnedLink("xdp_" + iface.Name)
	}
	if a.TC {
		if err := e.attachTC(a, iface); err != nil {
			return err
		}
	}
	if !a.XDP {
		return nil
	}
	err := e.attachXDP(a, iface)
	if err != nil && mode != ModeXDP && !errors.Is(err, errXDPBusy) {
		// The driver has no native XDP: TC alone, never generic XDP.
		a.XDP, a.XDPEgress = false, false
		a.Reason = fmt.Sprintf("no native XDP in the driver (%v)", err)
		return e.registerIface(a.Attachment, iface.HardwareAddr)
	}
	return err
}

// xdpDelivers says whether XDP belongs on an interface: whether frames sent
// to it from XDP arrive (a veth delivers them only to a peer that runs XDP
// in its driver). Datagrams with partial checksums, which XDP cannot relay,
// it recognises and hands to TC (bpf/turn_offload.c, maybe_partial).
func xdpDelivers(index int) (bool, string) {
	li, err := readLink(index, -1)
	if err != nil {
		return false, fmt.Sprintf("link unknown (%v)", err)
	}
	switch li.kind {
	case "":
		return true, "device with a driver of its own"
	case "veth":
		peer, err := readLink(li.peerIndex, li.peerNetnsID)
		if err != nil {
			return false, fmt.Sprintf("veth peer unknown (%v)", err)
		}
		if !peer.xdpAttached {
			return false, "veth peer runs no XDP program (XDP_TX and redirects to it would be dropped)"
		}
		return true, "veth peer runs XDP"
	}
	return false, fmt.Sprintf("%s device", li.kind)
}

var errXDPBusy = errors.New("already runs an XDP program")

func (e *Engine) attachXDP(a *attachment, iface *net.Interface) error {
	name := "xdp_" + iface.Name
	pin := e.pinPath(name)
	if l, ok := e.reusePinnedLink(pin, e.objs.TurnOffload); ok {
		a.links[name], a.Pinned = l, true
		return nil
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: e.objs.TurnOffload, Interface: iface.Index, Flags: link.XDPDriverMode})
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
		// Never stack a second program: the interface belongs to another
		// XDP user, such as `ebrtc turn --offload xdp`.
		return fmt.Errorf("%w (ebrtc turn?): %v", errXDPBusy, err)
	}
	if err != nil {
		return fmt.Errorf("attach native XDP: %w", err)
	}
	return e.keepLink(a, name, l)
}

func (e *Engine) attachTC(a *attachment, iface *net.Interface) error {
	name := "tc_ingress_" + iface.Name
	pin := e.pinPath(name)
	if l, ok := e.reusePinnedLink(pin, e.tc); ok {
		a.links[name], a.Pinned = l, true
		return nil
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: e.tc, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("attach TC ingress: %w", err)
	}
	return e.keepLink(a, name, l)
}

func (e *Engine) keepLink(a *attachment, name string, l link.Link) error {
	if pin := e.pinPath(name); pin != "" {
		if err := l.Pin(pin); err != nil {
			l.Close()
			return fmt.Errorf("pin link: %w", err)
		}
		a.created = append(a.created, l)
	}
	a.links[name] = l
	return nil
}

// dropPinnedLink detaches a hook an earlier run pinned under name.
func (e *Engine) dropPinnedLink(name string) {
	pin := e.pinPath(name)
	if pin == "" {
		return
	}
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		_ = l.Unpin()
		l.Close()
	}
}

func (a *attachment) close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	clear(a.links)
	return errors.Join(errs...)
}

// abandon undoes a failed attach: links pinned by it are unpinned too, so
// they do not outlive the process.
func (a *attachment) abandon() {
	for _, l := range a.created {
		_ = l.Unpin()
	}
	_ = a.close()
}

// registerIface tells the programs the interface's MAC address (frames for
// other hosts go to the kernel) and which hooks run there.
func (e *Engine) registerIface(a Attachment, mac net.HardwareAddr) error {
	info := turnIfaceInfo{Flags: ifaceRegistered, Slot: a.slot}
	if len(mac) == 6 {
		info.Mac = [6]byte(mac)
	}
	if a.XDP {
		info.Flags |= ifaceXDP
	}
	if a.TC {
		info.Flags |= ifaceTC
	}
	if a.XDPEgress {
		info.Flags |= ifaceXDPEgress
	}
	if err := e.objs.Ifaces.Put(uint32(a.Index), info); err != nil {
		return fmt.Errorf("register interface: %w", err)
	}
	return e.bumpIfaceGen()
}

// bumpIfaceGen voids the paths the programs cached from the interfaces
// table (struct path in bpf/turn.h), after a change to it. The programs bump
// it too (an interface found to take no XDP frames); a bump lost in the
// race still changes the value after this change, so no path outlives it.
func (e *Engine) bumpIfaceGen() error {
	var gen uint32
	if err := e.objs.IfaceGen.Lookup(uint32(0), &gen); err != nil {
		return fmt.Errorf("interfaces generation: %w", err)
	}
	if err := e.objs.IfaceGen.Put(uint32(0), gen+1); err != nil {
		return fmt.Errorf("interfaces generation: %w", err)
	}
	return nil
}

const maxIfaceSlots = 256 // MAX_IFACE_SLOTS

// Flags of struct iface_info (bpf/turn.h).
const (
	ifaceRegistered = 0x1
	ifaceXDP        = 0x2
	ifaceTC         = 0x4
	ifaceXDPEgress  = 0x8
)

// Attachments lists where the fast path runs, and why so, as it stands:
// an interface that failed to take XDP frames is no XDP egress any more.
func (e *Engine) Attachments() []Attachment {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Attachment, 0, len(e.attached))
	for _, a := range e.attached {
		cur := a.Attachment
		var info turnIfaceInfo
		if err := e.objs.Ifaces.Lookup(uint32(cur.Index), &info); err == nil && cur.XDPEgress && info.Flags&ifaceXDPEgress == 0 {
			cur.XDPEgress = false
			cur.Reason += fmt.Sprintf("; it took no XDP frames (%d lost), so datagrams for it go to TC or the kernel", info.XmitFailures)
		}
		out = append(out, cur)
	}
	return out
}

// XmitFailed is how many fast datagrams, by direction, left XDP towards
// our interfaces but were not taken (a hairpin counts in both): the fast
// counters count them, though they were not relayed.
func (e *Engine) XmitFailed() (toPeer, toClient uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for idx := range e.attached {
		var info turnIfaceInfo
		if e.objs.Ifaces.Lookup(uint32(idx), &info) == nil {
			toPeer += info.FailedToPeer
			toClient += info.FailedToClient
		}
	}
	return toPeer, toClient
}

// XmitFailures is how many frames sent from XDP the interface did not take.
func (e *Engine) XmitFailures(ifindex int) uint64 {
	var info turnIfaceInfo
	if e.objs.Ifaces.Lookup(uint32(ifindex), &info) != nil {
		return 0
	}
	return info.XmitFailures
}
