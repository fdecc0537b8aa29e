// Package bench is what `ebrtc bench`'s measurements share: the
// environment a run measures in (the namespace testbed, a work directory,
// the relay core the thing under test is isolated on), the socket and
// in-kernel traffic generators, the rate search and the trials' accounting,
// and the report's machine facts, targets, JSON and charts. Each measured
// thing has a package of its own on top: turnbench (TURN relays),
// sfubench (SFUs), afxdpbench (an endpoint's AF_XDP paths).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// Env is where one run measures: the testbed, the ebrtc binary, a work
// directory and, isolated, the relay core.
type Env struct {
	Ctx     context.Context // cancelled: the run stops between trials
	Testbed *testbed.Testbed
	Bin     string    // the ebrtc binary
	WorkDir string    // removed with the environment
	Log     io.Writer // the processes' output (io.Discard unless asked)
	// Isolated runs: the relay core, and the tasks of the thing under
	// test pinned on it (PinRelay), whose run time Trial and SampleCore
	// account.
	core       *relayCore
	relayTasks Tasks
}

// NewEnv builds what a run needs: the testbed, a work directory, and with
// isolate the relay core, after prepare (if any) has added to the testbed
// what the core must know of (its interfaces). The function returned
// removes all of it.
func NewEnv(ctx context.Context, bin string, log io.Writer, isolate bool, prepare func(*Env) error) (*Env, func(), error) {
	if log == nil {
		log = io.Discard
	}
	tb, err := testbed.New()
	if err != nil {
		return nil, nil, fmt.Errorf("testbed: %w", err)
	}
	e := &Env{Ctx: ctx, Testbed: tb, Bin: bin, Log: log}
	closeEnv := func() {
		if e.core != nil {
			e.core.release()
		}
		if e.WorkDir != "" {
			os.RemoveAll(e.WorkDir)
		}
		tb.Close()
	}
	if e.WorkDir, err = os.MkdirTemp("", "ebrtc-bench"); err == nil && prepare != nil {
		err = prepare(e)
	}
	if err == nil && isolate {
		if e.core, err = newRelayCore(tb); err != nil {
			err = fmt.Errorf("isolate: %w", err)
		}
	}
	if err != nil {
		closeEnv()
		return nil, nil, err
	}
	return e, closeEnv, nil
}

// OnTestbed is an environment on a testbed the caller built and removes:
// not isolated, without a work directory (the demo's).
func OnTestbed(ctx context.Context, tb *testbed.Testbed, bin string) *Env {
	return &Env{Ctx: ctx, Testbed: tb, Bin: bin, Log: io.Discard}
}

// Select picks from all, in the order asked, what names asks for (is
// says whether a thing's name is the one asked); none, or "all", picks
// everything. kind and have name the things in the error of an unknown
// name.
func Select[T any](kind string, all []T, names []string, name func(T) string, is func(name, asked string) bool, have string) ([]T, error) {
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return all, nil
	}
	var out []T
	for _, n := range names {
		found := false
		for _, x := range all {
			if is(name(x), n) {
				out, found = append(out, x), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown %s %q (have %s)", kind, n, have)
		}
	}
	return out, nil
}

// Progressf writes a progress line to w (nil: none).
func Progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "bench: "+format+"\n", args...)
	}
}
