// Command ebrtc runs eBPF-accelerated WebRTC media relays.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/ebrtc/ebrtc/internal/logs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"turn", "run a TURN server (RFC 8656) with the XDP fast path", runTurn},
	{"offload", "offload an unmodified TURN server's channels to XDP (needs root)", runOffload},
	{"sfu", "run a selective forwarding unit: encrypted media (DTLS-SRTP) in user space, or plain RTP forwarded in eBPF", runSFU},
	{"top", "live view of a running turn, offload or sfu server (its admin endpoint)", runTop},
	{"bench", "benchmark TURN relays on a namespace testbed (needs root)", runBench},
	{"rx-probe", "receive for ebrtc bench --afxdp: one receive path, per-datagram times (needs root)", runRXProbe},
	{"tx-probe", "send for ebrtc bench --afxdp: one transmit path's blast (needs root)", runTXProbe},
	{"profile", "charge a loaded BPF program's perf samples to its source lines (needs root)", runProfile},
	{"demo", "show the fast path on a namespace testbed (needs root)", runDemo},
	{"version", "print the version", runVersion},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "ebrtc: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "ebrtc: eBPF-accelerated WebRTC media relays\n\nUsage: ebrtc COMMAND [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ebrtc COMMAND --help' for a command's flags.")
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "ebrtc %s\n", version)
	return 0
}

// newFlags is a subcommand's flag set: its usage and errors go to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses a subcommand's arguments; when it should stop there,
// ok is false and status its exit status (0 after --help, 2 for a bad
// flag, whose message fs printed).
func parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	switch err := fs.Parse(args); {
	case err == flag.ErrHelp:
		return 0, false
	case err != nil:
		return 2, false
	}
	return 0, true
}

// logFlags adds --log-level and --log-format to fs; the function returned
// builds the logger they ask for (after fs.Parse).
func logFlags(fs *flag.FlagSet) func(w io.Writer) (*slog.Logger, error) {
	level := fs.String("log-level", "info", "error, warn, info, debug or trace")
	format := fs.String("log-format", "text", "text or json (one JSON object per line, log/slog's)")
	return func(w io.Writer) (*slog.Logger, error) { return logs.New(w, *format, *level) }
}
