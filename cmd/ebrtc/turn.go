package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ebrtc/ebrtc/internal/handover"
	"github.com/ebrtc/ebrtc/internal/turnserver"
)

func runTurn(args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprintln(stdout, "Usage: ebrtc turn [flags]\n\nEvery flag is also a YAML key (--config) and an EBRTC_<FLAG> environment variable.\n\nFlags:")
			fs := turnserver.FlagSet()
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
	}
	settings, err := turnserver.Load(args, os.Getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "ebrtc turn: %v\n", err)
		return 2
	}
	// Resolved now: an upgrade replaces the file, and SIGHUP runs the new one.
	exe, exeErr := os.Executable()
	// Before "ready": a signal sent as soon as it is printed must find us.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	srv, err := turnserver.Start(settings)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc turn: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, srv.Describe())
	fmt.Fprintln(stdout, "ready")
	// A successor of an upgrade becomes the service's main process.
	_ = handover.Notify(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))

	for s := range sig {
		if s != syscall.SIGHUP {
			break
		}
		if exeErr != nil {
			fmt.Fprintf(stderr, "ebrtc turn: SIGHUP: cannot find this binary: %v\n", exeErr)
			continue
		}
		_ = handover.Notify("RELOADING=1")
		if err := srv.Upgrade(exe, append([]string{"turn"}, args...), stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "ebrtc turn: SIGHUP: %v\n", err)
			_ = handover.Notify("READY=1")
			continue
		}
		break
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "ebrtc turn: shutdown: %v\n", err)
		return 1
	}
	return 0
}
