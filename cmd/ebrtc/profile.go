package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ebrtc/ebrtc/internal/bpfprof"
)

// runProfile samples the whole machine with perf while a BPF program runs
// (driven by whatever load is running: a benchmark, real traffic) and
// charges the samples to the program's source lines.
func runProfile(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("profile", stderr)
	prog := fs.String("prog", "turn_offload", "name of the loaded BPF program")
	seconds := fs.Duration("duration", 10*time.Second, "how long to sample")
	freq := fs.Int("freq", 20000, "samples per second and CPU (cpu-clock: no PMU needed)")
	top := fs.Int("top", 25, "lines and functions to print")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if err := profile(*prog, *seconds, *freq, *top, stdout); err != nil {
		fmt.Fprintln(stderr, "ebrtc profile:", err)
		return 1
	}
	return 0
}

func profile(prog string, d time.Duration, freq, top int, stdout io.Writer) error {
	if _, err := exec.LookPath("perf"); err != nil {
		return fmt.Errorf("perf not found (apt-get install linux-perf): %w", err)
	}
	img, err := bpfprof.Find(prog)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ebrtc-profile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command("perf", "record", "-q", "-a", "-g", "-e", "cpu-clock", "-F", fmt.Sprint(freq),
		"-o", data, "--", "sleep", fmt.Sprintf("%.3f", d.Seconds()))
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %v: %s", err, out)
	}
	// The program must still be the one sampled: JIT addresses are per load.
	if again, err := bpfprof.Find(prog); err != nil || again.ID != img.ID {
		return fmt.Errorf("program %q was reloaded while sampling; run again under a steady load", prog)
	}
	var script bytes.Buffer
	cmd := exec.Command("perf", "script", "-i", data, "-F", "ip,sym")
	cmd.Stdout, cmd.Stderr = &script, io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	rep, err := bpfprof.Attribute(&script, img)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "program %s (id %d), %s of samples at %d Hz\n", img.Name, img.ID, d, freq)
	rep.Write(stdout, top)
	return nil
}
