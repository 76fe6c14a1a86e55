// Package logging builds the process's one log stream: go-kit/log, the
// project's logger, and a *slog.Logger for libraries that take one
// (exporter-toolkit), writing through the same go-kit logger, so every line
// has one shape whoever wrote it.
//
// The shape: one timestamp (ts, UTC), then level, caller and msg, then the
// line's own keys. In logfmt the fixed keys always come first in that
// order; go-kit's JSON encoder sorts the keys of every object. Numbers and
// booleans stay numbers and booleans in JSON.
package logging

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// Levels and Formats are the values --log.level and --log.format accept.
var (
	Levels  = []string{"debug", "info", "warn", "error"}
	Formats = []string{"logfmt", "json"}
)

// New returns the process logger, which adds each line's caller, and the
// *slog.Logger that writes through it. lvl and format are among Levels and
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
	return log.With(base, "caller", log.DefaultCaller), slog.New(&handler{logger: base, min: slogLevel(lvl)})
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

// handler is a slog.Handler that writes each record as one go-kit line:
// go-kit's level value (so go-kit's filter applies), the record's caller,
// its message and its attributes, values as they are. slog's own time is
// left out: the go-kit logger stamps ts.
type handler struct {
	logger log.Logger
	min    slog.Level
	attrs  []any  // from WithAttrs, already flattened
	group  string // from WithGroup: the prefix of later keys
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	kv := make([]any, 0, 6+len(h.attrs)+2*r.NumAttrs())
	kv = append(kv, level.Key(), goKitLevel(r.Level))
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		// go-kit's caller form: the file's base name and the line.
		kv = append(kv, "caller", f.File[strings.LastIndexByte(f.File, '/')+1:]+":"+strconv.Itoa(f.Line))
	}
	kv = append(kv, "msg", r.Message)
	kv = append(kv, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		kv = appendAttr(kv, h.group, a)
		return true
	})
	return h.logger.Log(kv...)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]any(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = appendAttr(c.attrs, h.group, a)
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = joinKey(h.group, name)
	return &c
}

// appendAttr flattens a into key-value pairs, a group's keys prefixed with
// its name as in "group.key".
func appendAttr(kv []any, group string, a slog.Attr) []any {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return kv // slog's rule: an empty attribute is dropped
	}
	if a.Value.Kind() == slog.KindGroup {
		prefix := group
		if a.Key != "" {
			prefix = joinKey(group, a.Key)
		}
		for _, ga := range a.Value.Group() {
			kv = appendAttr(kv, prefix, ga)
		}
		return kv
	}
	// Any keeps numbers, booleans and durations as Go values, which the
	// JSON encoder writes as numbers and booleans.
	return append(kv, joinKey(group, a.Key), a.Value.Any())
}

func joinKey(group, key string) string {
	if group == "" {
		return key
	}
	return group + "." + key
}

func goKitLevel(l slog.Level) level.Value {
	switch {
	case l >= slog.LevelError:
		return level.ErrorValue()
	case l >= slog.LevelWarn:
		return level.WarnValue()
	case l >= slog.LevelInfo:
		return level.InfoValue()
	}
	return level.DebugValue()
}
