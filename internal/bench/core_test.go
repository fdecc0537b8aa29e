package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A busy loop pinned to the relay CPU is charged to its thread, to the
// nanosecond by schedstat, and shows on that CPU's busy time; a sleeping
// thread is charged (almost) nothing.
func TestBusyLoopIsChargedToTheRelayCPU(t *testing.T) {
	if runtime.NumCPU() < 2 {
		testenv.Missing(t, "2 CPUs")
	}
	cpu := runtime.NumCPU() - 1
	type result struct {
		tid       int
		err       error
		runBefore uint64
	}
	ready, done := make(chan result), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := unix.Gettid()
		if err := unix.SchedSetaffinity(0, cpuSet(cpu)); err != nil {
			ready <- result{err: err}
			return
		}
		before, err := runTime([]int{tid})
		ready <- result{tid: tid, runBefore: before, err: err}
		// 300 ms of this thread's own CPU clock (bounded in wall time): on a
		// shared VM other tasks may take the CPU from it meanwhile.
		cpu0 := threadCPU()
		for end := time.Now().Add(5 * time.Second); threadCPU()-cpu0 < 300*time.Millisecond && time.Now().Before(end); {
		}
		close(done)
	}()
	r := <-ready
	if r.err != nil {
		t.Fatal(r.err)
	}
	boundBefore, err := boundTasks(cpu)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "1")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	sleepBefore, err := runTime([]int{sleeper.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	after, err := runTime([]int{r.tid})
	if err != nil {
		t.Fatal(err)
	}
	boundAfter, _ := boundTasks(cpu)
	sleepAfter, _ := runTime([]int{sleeper.Process.Pid})
	// schedstat, read from /proc, agrees with the kernel's thread CPU clock.
	if ran := time.Duration(after - r.runBefore); ran < 290*time.Millisecond || ran > 400*time.Millisecond {
		t.Errorf("a busy loop of 300 ms of CPU time was charged %v", ran)
	}
	// Seen from the CPU: the loop is a task bound to it, outside any relay's set.
	if stray := time.Duration(CoreSample{bound: boundAfter}.StrayNsSince(CoreSample{bound: boundBefore})); stray < 250*time.Millisecond {
		t.Errorf("tasks bound to CPU %d ran %v during a busy loop of 300 ms CPU time pinned to it", cpu, stray)
	}
	if own := time.Duration(CoreSample{bound: boundAfter, relay: map[int]uint64{r.tid: 0}}.StrayNsSince(CoreSample{bound: boundBefore})); own > 100*time.Millisecond {
		t.Errorf("with the loop's thread counted as the relay's, %v of other tasks remain", own)
	}
	if slept := time.Duration(sleepAfter - sleepBefore); slept > 20*time.Millisecond {
		t.Errorf("a sleeping process was charged %v", slept)
	}
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// pinProcess confines every thread of a process; what it starts later
// inherits the set.
func TestPinProcess(t *testing.T) {
	if runtime.NumCPU() < 2 {
		testenv.Missing(t, "2 CPUs")
	}
	cpu := runtime.NumCPU() - 1
	p := exec.Command("sh", "-c", "sleep 2 & wait")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Process.Kill()
	if err := pinProcess(p.Process.Pid, cpuSet(cpu)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := "Cpus_allowed_list:\t" + strconv.Itoa(cpu)
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("status lacks %q:\n%s", want, b)
	}
}
