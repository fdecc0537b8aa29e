package turnbench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTime is system-wide CPU time from /proc/stat, in nanoseconds.
type cpuTime struct{ busy, total uint64 }

// readCPU sums every CPU's time; busy excludes idle and iowait. System-wide,
// so softirq work (where XDP and the kernel's UDP path run) is included.
func readCPU() (cpuTime, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTime{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] != "cpu" {
			continue
		}
		var t cpuTime
		for i, v := range fields[1:] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return cpuTime{}, fmt.Errorf("/proc/stat: %q", v)
			}
			// guest and guest_nice (fields 9, 10) are already in user and nice.
			if i >= 8 {
				break
			}
			t.total += n
			if i != 3 && i != 4 { // idle, iowait
				t.busy += n
			}
		}
		// /proc/stat counts in USER_HZ (100 per second).
		return cpuTime{busy: t.busy * 1e7, total: t.total * 1e7}, nil
	}
	return cpuTime{}, fmt.Errorf("/proc/stat: no cpu line")
}
