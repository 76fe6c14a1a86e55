// SPDX-License-Identifier: Apache-2.0

package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log/level"
)

func TestSlogLinesHaveTheGoKitShape(t *testing.T) {
	var buf bytes.Buffer
	logger, slogger := New(&buf, "info", "logfmt")
	_, _, line, _ := runtime.Caller(0) // the caller= lines below are line+1 and line+2
	level.Info(logger).Log("msg", "ours", "n", 1)
	slogger.With("listener", "web").WithGroup("tls").Info("theirs", "n", 2, "err", errors.New("boom"))
	slogger.Debug("below the level")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{
		fmt.Sprintf(`level=info caller=logging_test.go:%d msg=ours n=1`, line+1),
		fmt.Sprintf(`level=info caller=logging_test.go:%d msg=theirs listener=web tls.n=2 tls.err=boom`, line+2),
	} {
		ts, rest, _ := strings.Cut(lines[i], " ")
		if !strings.HasPrefix(ts, "ts=") || rest != want {
			t.Errorf("line %d = %q, want ts=… %s", i, lines[i], want)
		}
	}
}

func TestSlogValuesKeepTheirJSONType(t *testing.T) {
	var buf bytes.Buffer
	_, slogger := New(&buf, "debug", "json")
	slogger.Debug("values", "int", 3, "float", 1.5, "bool", true, "duration", 2*time.Second)
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"int": 3.0, "float": 1.5, "bool": true, "duration": "2s", "level": "debug", "msg": "values"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	if _, ok := got["time"]; ok {
		t.Errorf("line has slog's time key: %s", buf.String())
	}
}

// Only slog's own timestamp is dropped: an attribute a library names "time"
// is its data and stays, whatever its type.
func TestSlogAttributeNamedTimeStays(t *testing.T) {
	var buf bytes.Buffer
	_, slogger := New(&buf, "info", "logfmt")
	slogger.Info("a string", "time", "noon")
	slogger.Info("a time", "time", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for i, want := range []string{` msg="a string" time=noon`, ` msg="a time" time=2026-01-02T03:04:05Z`} {
		if i >= len(lines) || !strings.HasSuffix(lines[i], want) || strings.Count(lines[i], "time=") != 1 {
			t.Errorf("line %d = %q, want it to end with %q and hold one time key", i, buf.String(), want)
		}
	}
}
