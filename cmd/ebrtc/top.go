package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
)

// defaultAdmin is where the packaged servers (deploy/) serve their admin endpoint.
const defaultAdmin = "unix:/run/ebrtc/turn.sock"

func runTop(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("top", stderr)
	addr := fs.String("admin", defaultAdmin, "the server's admin endpoint (its admin-listen): unix:PATH or IP:PORT")
	interval := fs.Duration("interval", 2*time.Second, "time between frames (rates are over it)")
	frames := fs.Int("frames", 0, "stop after this many frames (0: until interrupted); 1 prints one frame with rates over --interval")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc top [flags]\n\nA live view of a running ebrtc turn, offload or sfu, read from its admin endpoint.\n\nFlags:")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if _, err := admin.ParseAddress(*addr); err != nil {
		fmt.Fprintf(stderr, "ebrtc top: --admin: %v\n", err)
		return 2
	}
	if *interval < 100*time.Millisecond {
		fmt.Fprintln(stderr, "ebrtc top: --interval: at least 100ms")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := top(ctx, stdout, *addr, *interval, *frames); err != nil {
		fmt.Fprintf(stderr, "ebrtc top: %v\n", err)
		return 1
	}
	return 0
}

// top samples the endpoint every interval and renders a frame from each
// pair of snapshots; on a terminal each frame replaces the last.
func top(ctx context.Context, w io.Writer, addr string, interval time.Duration, frames int) error {
	fetch := func() (admin.Status, error) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return admin.Fetch(c, addr)
	}
	prev, err := fetch()
	if err != nil {
		return err
	}
	clear := isTerminal(w)
	for n := 0; frames == 0 || n < frames; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		cur, err := fetch()
		if err != nil {
			// A restart or an upgrade takes the endpoint away for a moment.
			fmt.Fprintf(w, "%s ebrtc top: %v (retrying)\n", time.Now().Format(time.TimeOnly), err)
			continue
		}
		if clear {
			fmt.Fprint(w, admin.ClearScreen)
		}
		admin.Render(w, prev, cur)
		prev = cur
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
