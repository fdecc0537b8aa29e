// Package logs builds the structured loggers every ebrtc command writes
// with (log/slog, text or JSON lines), and hands pion's libraries the same
// logger through their LoggerFactory.
package logs

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/pion/logging"
)

// LevelTrace is below slog's Debug: pion's per-message tracing.
const LevelTrace = slog.LevelDebug - 4

// Levels are the accepted --log-level values.
var Levels = map[string]slog.Level{"error": slog.LevelError, "warn": slog.LevelWarn, "info": slog.LevelInfo,
	"debug": slog.LevelDebug, "trace": LevelTrace}

// Formats are the accepted --log-format values.
var Formats = []string{"text", "json"}

// New is a logger writing to w in format ("text" or "json") from level on.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lv, ok := Levels[level]
	if !ok {
		return nil, fmt.Errorf("log level %q is not error, warn, info, debug or trace", level)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey && a.Value.Any() == LevelTrace {
			a.Value = slog.StringValue("TRACE")
		}
		return a
	}}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q is not text or json", format)
}

// PionFactory gives pion's libraries l, with their scope as an attribute.
// quiet scopes log at warn and above unless l is at debug or below: pion
// logs some refusals per datagram at info, and a flood must not flood the
// log (counters show them).
func PionFactory(l *slog.Logger, quiet ...string) logging.LoggerFactory {
	return &pionFactory{l: l, quiet: quiet}
}

type pionFactory struct {
	l     *slog.Logger
	quiet []string
}

func (f *pionFactory) NewLogger(scope string) logging.LeveledLogger {
	min := LevelTrace
	for _, q := range f.quiet {
		if q == scope && !f.l.Enabled(context.Background(), slog.LevelDebug) {
			min = slog.LevelWarn
		}
	}
	return &pionLogger{l: f.l.With("scope", scope), min: min}
}

// pionLogger is pion's LeveledLogger on slog.
type pionLogger struct {
	l   *slog.Logger
	min slog.Level
}

func (p *pionLogger) log(level slog.Level, msg string) {
	if level >= p.min {
		p.l.Log(context.Background(), level, msg)
	}
}

func (p *pionLogger) logf(level slog.Level, format string, args ...any) {
	if level >= p.min && p.l.Enabled(context.Background(), level) {
		p.l.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (p *pionLogger) Trace(msg string)                  { p.log(LevelTrace, msg) }
func (p *pionLogger) Tracef(format string, args ...any) { p.logf(LevelTrace, format, args...) }
func (p *pionLogger) Debug(msg string)                  { p.log(slog.LevelDebug, msg) }
func (p *pionLogger) Debugf(format string, args ...any) { p.logf(slog.LevelDebug, format, args...) }
func (p *pionLogger) Info(msg string)                   { p.log(slog.LevelInfo, msg) }
func (p *pionLogger) Infof(format string, args ...any)  { p.logf(slog.LevelInfo, format, args...) }
func (p *pionLogger) Warn(msg string)                   { p.log(slog.LevelWarn, msg) }
func (p *pionLogger) Warnf(format string, args ...any)  { p.logf(slog.LevelWarn, format, args...) }
func (p *pionLogger) Error(msg string)                  { p.log(slog.LevelError, msg) }
func (p *pionLogger) Errorf(format string, args ...any) { p.logf(slog.LevelError, format, args...) }
