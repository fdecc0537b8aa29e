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
		end := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(end) {
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
	if ran := time.Duration(after - r.runBefore); ran < 250*time.Millisecond || ran > 400*time.Millisecond {
		t.Errorf("a 300 ms busy loop was charged %v", ran)
	}
	// Seen from the CPU: the loop is a task bound to it, outside any relay's set.
	if stray := time.Duration(strayNs(coreSample{bound: boundBefore}, coreSample{bound: boundAfter}, nil)); stray < 250*time.Millisecond {
		t.Errorf("tasks bound to CPU %d ran %v during a 300 ms busy loop pinned to it", cpu, stray)
	}
	if own := time.Duration(strayNs(coreSample{bound: boundBefore}, coreSample{bound: boundAfter}, []int{r.tid})); own > 100*time.Millisecond {
		t.Errorf("with the loop's thread counted as the relay's, %v of other tasks remain", own)
	}
	if slept := time.Duration(sleepAfter - sleepBefore); slept > 20*time.Millisecond {
		t.Errorf("a sleeping process was charged %v", slept)
	}
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
