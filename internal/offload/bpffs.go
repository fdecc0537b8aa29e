package offload

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

const bpffsRoot = "/sys/fs/bpf"

// ensureBPFFS mounts bpffs at /sys/fs/bpf when a pin directory below it is
// asked for and nothing (systemd, usually) has mounted it yet.
func ensureBPFFS(dir string) error {
	if !strings.HasPrefix(dir, bpffsRoot+"/") {
		return nil // the caller's own bpffs mount
	}
	var st unix.Statfs_t
	if err := unix.Statfs(bpffsRoot, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(bpffsRoot, 0o755); err != nil {
		return fmt.Errorf("offload: %s: %w", bpffsRoot, err)
	}
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("offload: mount bpffs at %s: %w", bpffsRoot, err)
	}
	return nil
}
