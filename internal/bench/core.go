package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// relayCore confines the relay under test, with all of its kernel work, to
// one CPU (the last), and everything else (this process's generator, the
// client and peer sides) to the others, so that what the relay costs is
// read on its own core (shared/design/relay-core-notes.md). The server's
// veths run NAPI (GRO on) in threads of their own, pinned with the relay;
// the far ends' NAPI threads stay with the generator.
type relayCore struct {
	cpu  int
	rest unix.CPUSet
	all  unix.CPUSet
	// Interfaces whose receive work is the relay's (the server's ends of
	// the testbed's veths), and the far ends'.
	relayIfaces, farIfaces []string
}

func newRelayCore(tb *testbed.Testbed) (*relayCore, error) {
	n := runtime.NumCPU()
	if n < 2 {
		return nil, fmt.Errorf("isolation needs 2 CPUs, this machine has %d", n)
	}
	rc := &relayCore{cpu: n - 1}
	for _, l := range tb.Links() {
		rc.relayIfaces = append(rc.relayIfaces, l.ServerIface)
		if !slices.Contains(rc.farIfaces, l.FarIface) { // far ends may share a name
			rc.farIfaces = append(rc.farIfaces, l.FarIface)
		}
	}
	for c := 0; c < n; c++ {
		rc.all.Set(c)
		if c != rc.cpu {
			rc.rest.Set(c)
		}
	}
	// The generator is this process: every thread it has, and (inherited) will have.
	if err := pinProcess(os.Getpid(), &rc.rest); err != nil {
		return nil, fmt.Errorf("pin the generator: %w", err)
	}
	for _, l := range tb.Links() {
		if err := tb.Server.Do(func() error { return netns.EnableGRO(l.ServerIface) }); err != nil {
			return nil, err
		}
		if err := SetThreadedNAPI(tb.Server, l.ServerIface, true); err != nil {
			return nil, err
		}
		if err := SetThreadedNAPI(l.Far, l.FarIface, true); err != nil {
			return nil, err
		}
	}
	return rc, nil
}

// release lets this process run anywhere again.
func (rc *relayCore) release() { _ = pinProcess(os.Getpid(), &rc.all) }

// Isolated says whether the run has a relay core.
func (e *Env) Isolated() bool { return e.core != nil }

// CoreCPU is the relay core's CPU (isolated runs).
func (e *Env) CoreCPU() int { return e.core.cpu }

// PinRelay pins the processes of the thing under test, with the server's
// interfaces' NAPI threads, on the relay core: their run time is what
// Trial, SampleCore and Saturate account. Not isolated, it does nothing.
func (e *Env) PinRelay(pids ...int) error {
	if e.core == nil {
		return nil
	}
	var err error
	e.relayTasks, err = e.core.pin(pids)
	return err
}

// Pin pins processes on the relay core as PinRelay does, for a
// measurement of their own (a probe): their tasks, none when not
// isolated.
func (e *Env) Pin(pids ...int) (Tasks, error) {
	if e.core == nil {
		return Tasks{}, nil
	}
	return e.core.pin(pids)
}

// SampleCore reads the relay core: the pinned relay's tasks and every task
// bound to the relay CPU (not isolated: an empty sample).
func (e *Env) SampleCore() (CoreSample, error) {
	if e.core == nil {
		return CoreSample{}, nil
	}
	return e.core.sample(e.relayTasks)
}

// PrioritizeFarNAPI gives the far ends' NAPI threads a real-time priority
// over the generator sharing their CPU (relayCore.prioritizeFarNAPI says
// why), and returns what undoes it; not isolated, it does nothing.
func (e *Env) PrioritizeFarNAPI() (restore func(), err error) {
	if e.core == nil {
		return func() {}, nil
	}
	return e.core.prioritizeFarNAPI()
}

// SetThreadedNAPI moves the interface's NAPI polling into kernel threads
// (napi/IFACE-ID), which can be pinned and whose run time is accounted,
// or (off) back to softirq.
func SetThreadedNAPI(ns *netns.NS, iface string, on bool) error {
	v := map[bool]string{true: "1", false: "0"}[on]
	// ip netns exec mounts the namespace's own /sys.
	if out, err := ns.Output("sh", "-c", "echo "+v+" > /sys/class/net/"+iface+"/threaded"); err != nil {
		return fmt.Errorf("threaded NAPI %s on %s: %v %s", v, iface, err, out)
	}
	return nil
}

// Tasks are the tasks whose run time is a pinned program's: every thread
// its processes have when sampled (Janus starts one per handle, Go may
// start more), and its interfaces' NAPI threads. The zero value is none.
type Tasks struct{ pids, napi []int }

func (t Tasks) tids() []int {
	out := slices.Clone(t.napi)
	for _, pid := range t.pids {
		tids, _ := threads(pid) // gone: nothing more to count
		out = append(out, tids...)
	}
	return out
}

// RunTime is the CPU time the tasks have run, in ns (0 for none).
func (t Tasks) RunTime() (uint64, error) { return runTime(t.tids()) }

// pin puts the relay's processes and its interfaces' NAPI threads on the
// relay CPU (threads the processes start later inherit it), and the far
// ends' NAPI threads on the others.
func (rc *relayCore) pin(relayPIDs []int) (Tasks, error) {
	relay := Tasks{pids: relayPIDs}
	for _, pid := range relayPIDs {
		if err := pinProcess(pid, cpuSet(rc.cpu)); err != nil {
			return relay, fmt.Errorf("pin relay process %d: %w", pid, err)
		}
	}
	for i, set := range [][]string{rc.relayIfaces, rc.farIfaces} {
		tids, err := napiThreads(set)
		if err != nil {
			return relay, err
		}
		if i == 0 && len(tids) < len(set) {
			return relay, fmt.Errorf("found %d NAPI threads for %v, want one each", len(tids), set)
		}
		target := cpuSet(rc.cpu)
		if i == 1 {
			target = &rc.rest
		}
		for _, tid := range tids {
			if err := unix.SchedSetaffinity(tid, target); err != nil {
				return relay, fmt.Errorf("pin NAPI thread %d: %w", tid, err)
			}
		}
		if i == 0 {
			relay.napi = tids
		}
	}
	return relay, nil
}

func cpuSet(cpu int) *unix.CPUSet {
	var s unix.CPUSet
	s.Set(cpu)
	return &s
}

// pinProcess sets the affinity of every thread of pid; threads created
// later inherit it from their creator.
func pinProcess(pid int, set *unix.CPUSet) error {
	tids, err := threads(pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}

func threads(pid int) ([]int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// napiThreads finds the NAPI kernel threads of the named interfaces by
// their names, napi/IFACE-ID (truncated to 15 characters by the kernel).
func napiThreads(ifaces []string) ([]int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		for _, iface := range ifaces {
			if prefix := "napi/" + iface + "-"; strings.HasPrefix(comm, prefix) || strings.HasPrefix(prefix, comm+"-") {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

// runTime is the CPU time the tasks have run, in ns, from the scheduler's
// own accounting (/proc/TID/schedstat, first field): exact, where
// /proc/stat's 10 ms ticks mostly book short bursts as idle.
func runTime(tids []int) (uint64, error) {
	var sum uint64
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", tid))
		if err != nil {
			return 0, fmt.Errorf("schedstat of task %d: %w", tid, err)
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("schedstat of task %d: empty", tid)
		}
		ns, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("schedstat of task %d: %w", tid, err)
		}
		sum += ns
	}
	return sum, nil
}

// boundTasks are the run times of every task confined to cpu alone (the
// relay's, and the CPU's own kernel threads: ksoftirqd, kworkers...).
func boundTasks(cpu int) (map[int]uint64, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	if err != nil {
		return nil, err
	}
	out := map[int]uint64{}
	for _, d := range dirs {
		tid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) != nil || set.Count() != 1 || !set.IsSet(cpu) {
			continue
		}
		if ns, err := runTime([]int{tid}); err == nil {
			out[tid] = ns
		}
	}
	return out, nil
}

// CoreSample is the relay core's state at one moment: the relay's tasks'
// run time, and every task bound to the relay CPU.
type CoreSample struct {
	relay map[int]uint64 // by task
	bound map[int]uint64
}

func (rc *relayCore) sample(t Tasks) (CoreSample, error) {
	relay := map[int]uint64{}
	for _, tid := range t.tids() {
		ns, err := runTime([]int{tid})
		if err != nil {
			if _, gone := os.Stat(fmt.Sprintf("/proc/%d", tid)); gone != nil {
				continue // the thread ended since it was listed
			}
			return CoreSample{}, err
		}
		relay[tid] = ns
	}
	b, err := boundTasks(rc.cpu)
	return CoreSample{relay: relay, bound: b}, err
}

// RelayNsSince is what the relay's tasks ran since before (a task started
// in between counts whole; one that ended in between is lost).
func (after CoreSample) RelayNsSince(before CoreSample) uint64 {
	var sum uint64
	for tid, ns := range after.relay {
		if ns > before.relay[tid] {
			sum += ns - before.relay[tid]
		}
	}
	return sum
}

// StrayNsSince is what tasks bound to the relay CPU, other than the
// relay's, ran since before: the core's time the relay's figure leaves out.
func (after CoreSample) StrayNsSince(before CoreSample) uint64 {
	mine := map[int]bool{}
	for _, s := range []CoreSample{before, after} {
		for tid := range s.relay {
			mine[tid] = true
		}
	}
	var sum uint64
	for tid, ns := range after.bound {
		if mine[tid] {
			continue
		}
		if ns > before.bound[tid] {
			sum += ns - before.bound[tid]
		}
	}
	return sum
}

// prioritizeFarNAPI gives the far ends' NAPI threads a real-time priority
// over the generator sharing their CPU, and returns what undoes it. An SFU
// sends every receiver's replica of a packet at once, all to the one far
// veth here; its ring (256 frames) overflows unless its consumer runs as
// soon as it fills, which a busy generator would otherwise delay. The
// price: woken for every burst, it costs the sender's core more wakeups.
func (rc *relayCore) prioritizeFarNAPI() (func(), error) {
	tids, err := napiThreads(rc.farIfaces)
	if err != nil {
		return nil, err
	}
	restore := func(tids []int) {
		for _, tid := range tids {
			_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: 0}, 0) // SCHED_OTHER
		}
	}
	for i, tid := range tids {
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 50}, 0); err != nil {
			restore(tids[:i])
			return nil, fmt.Errorf("SCHED_FIFO for NAPI thread %d: %w", tid, err)
		}
	}
	return func() { restore(tids) }, nil
}
