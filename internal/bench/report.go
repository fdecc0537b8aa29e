package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where a run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	Kernel    string `json:"kernel"`
	MemoryGiB int    `json:"memory_gib"`
}

// MachineFacts describes this machine.
func MachineFacts() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(string(b), "MemTotal: %d kB", &kb)
		m.MemoryGiB = (kb + 1<<19) >> 20
	}
	return m
}

// TargetResult is one of the targets, checked on this run.
type TargetResult struct {
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Want   string  `json:"want"`
	Met    bool    `json:"met"`
}

// WriteJSON writes a report as indented JSON.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
