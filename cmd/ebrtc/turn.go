package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

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
	srv, err := turnserver.Start(settings)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc turn: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, srv.Describe())
	fmt.Fprintln(stdout, "ready")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "ebrtc turn: shutdown: %v\n", err)
		return 1
	}
	return 0
}
