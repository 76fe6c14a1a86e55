// SPDX-License-Identifier: Apache-2.0

// Package logging builds the process's one log stream: go-kit/log, the
// project's logger, and a *slog.Logger for libraries that take one
// (exporter-toolkit), writing through the same go-kit logger, so every line
// has one shape whoever wrote it. The slog side is github.com/tjhop/slog-gokit
// (the handler Prometheus projects use for the same bridge), with a small
// go-kit adapter, slogValues, for what it does differently.
//
// The shape: one timestamp (ts, UTC), then level, caller and msg, then the
// line's own keys. In logfmt the fixed keys always come first in that
// order; go-kit's JSON encoder sorts the keys of every object. Numbers and
// booleans stay numbers and booleans in JSON.
package logging

import (
	"io"
	"log/slog"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	sloggokit "github.com/tjhop/slog-gokit"
)

// Levels and Formats are the values --log.level and --log.format accept.
var (
	Levels  = []string{"debug", "info", "warn", "error"}
	Formats = []string{"logfmt", "json"}
)

// New returns the process logger, which adds each line's caller, and the
// *slog.Logger that writes through it (slog-gokit resolves each record's
// caller from slog's own, so the base logger has none). lvl and format are among Levels and
// Formats (kingpin's Enum checks); anything else means info and logfmt.
func New(w io.Writer, lvl, format string) (log.Logger, *slog.Logger) {
	var out log.Logger
	if format == "json" {
		out = log.NewJSONLogger(log.NewSyncWriter(w))
	} else {
		out = fixedFirst{log.NewLogfmtLogger(log.NewSyncWriter(w))}
	}
	out = level.NewFilter(out, level.Allow(level.ParseDefault(lvl, level.InfoValue())))
	base := log.With(out, "ts", log.DefaultTimestampUTC)
	return log.With(base, "caller", log.DefaultCaller), slog.New(sloggokit.NewGoKitHandler(slogValues{base}, slogLevel(lvl)))
}

// The keys every line starts with, in this order.
var fixedKeys = [...]any{"ts", level.Key(), "caller", "msg"}

// fixedFirst puts the fixed keys first, whatever order the contexts added
// them in (go-kit's level.Info prepends the level before the timestamp).
type fixedFirst struct{ next log.Logger }

func (f fixedFirst) Log(keyvals ...any) error {
	if len(keyvals)%2 != 0 {
		return f.next.Log(keyvals...) // go-kit marks the missing value
	}
	out := make([]any, 0, len(keyvals))
	for _, k := range fixedKeys {
		for i := 0; i < len(keyvals); i += 2 {
			if keyvals[i] == k {
				out = append(out, keyvals[i], keyvals[i+1])
				break
			}
		}
	}
	for i := 0; i < len(keyvals); i += 2 {
		if !isFixed(keyvals[i]) {
			out = append(out, keyvals[i], keyvals[i+1])
		}
	}
	return f.next.Log(out...)
}

func isFixed(k any) bool {
	for _, f := range fixedKeys {
		if k == f {
			return true
		}
	}
	return false
}

func slogLevel(lvl string) slog.Level {
	switch lvl {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// slogValues sits between slog-gokit's handler and our go-kit logger and
// corrects the two ways the library's lines differ from our shape:
//   - it adds slog's own timestamp under "time", a second timestamp beside
//     the ts our go-kit logger stamps (in local time, too); the library
//     passes it as a bare time.Time, while attribute values always come as
//     strings or slog.Values, so exactly that pair is dropped;
//   - it passes every value but a string as a slog.Value, which go-kit's
//     JSON encoder writes as a string (slog.Value is a fmt.Stringer), so
//     numbers and booleans would turn into strings; each is unwrapped into
//     its Go value, as go-kit's own callers pass them.
type slogValues struct{ next log.Logger }

func (s slogValues) Log(keyvals ...any) error {
	out := make([]any, 0, len(keyvals))
	for i := 0; i+1 < len(keyvals); i += 2 {
		k, v := keyvals[i], keyvals[i+1]
		if _, stamp := v.(time.Time); stamp && k == slog.TimeKey {
			continue
		}
		if sv, ok := v.(slog.Value); ok {
			v = sv.Any()
		}
		out = append(out, k, v)
	}
	return s.next.Log(out...)
}
