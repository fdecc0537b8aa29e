package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// untilSignal runs fn with a context that SIGINT or SIGTERM cancels, and
// always waits for fn to return, so its cleanup (namespaces, processes) runs
// before the program exits. It reports whether a signal interrupted it.
func untilSignal(stderr io.Writer, fn func(ctx context.Context)) bool {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	select {
	case <-done:
		return false
	case <-ctx.Done():
		fmt.Fprintln(stderr, "interrupted: cleaning up")
		<-done
		return true
	}
}
