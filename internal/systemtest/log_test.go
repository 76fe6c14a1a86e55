// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logfmt/logfmt"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The fixed part of every log line, ours and exporter-toolkit's alike.
var fixedLogKeys = []string{"ts", "level", "caller", "msg"}

// logLine is one line of the log: its keys in order and its values as the
// format gave them (a JSON value keeps its type).
type logLine struct {
	keys   []string
	values map[string]any
}

// The built binary's log across a start (both listeners), a reload by
// SIGHUP, one by POST /-/reload and a shutdown has one shape in each
// format: the fixed keys on every line, one timestamp, and in JSON numbers
// and booleans as such.
func TestLogShapeOfTheBinary(t *testing.T) {
	bin := binary(t, "builds the binary and runs it twice")
	for _, format := range []string{"logfmt", "json"} {
		t.Run(format, func(t *testing.T) {
			lines := logOfALifetime(t, bin, format)
			for _, want := range []string{"Starting breach_exporter", "Listening on", "TLS is disabled.", "Reloaded on SIGHUP", "Config reloaded", "Shutting down"} {
				if !slices.ContainsFunc(lines, func(l logLine) bool { return l.values["msg"] == want }) {
					t.Errorf("no line with msg %q", want)
				}
			}
			for _, l := range lines {
				checkLogLine(t, format, l)
			}
			if format != "json" {
				return
			}
			// Numbers and booleans, from both writers, keep their type.
			for msg, key := range map[string]string{"Connection limit": "max_connections", "Config reloaded": "addresses", "TLS is disabled.": "http2"} {
				i := slices.IndexFunc(lines, func(l logLine) bool { return l.values["msg"] == msg })
				if i < 0 {
					t.Errorf("no line with msg %q", msg)
					continue
				}
				switch v := lines[i].values[key]; v.(type) {
				case json.Number, bool:
				default:
					t.Errorf("%q: %s = %#v, want a JSON number or boolean", msg, key, v)
				}
			}
		})
	}
}

func checkLogLine(t *testing.T, format string, l logLine) {
	t.Helper()
	if len(l.keys) < len(fixedLogKeys) || !slices.Contains(l.keys, "msg") {
		t.Errorf("line %v lacks the fixed keys %v", l.keys, fixedLogKeys)
		return
	}
	switch format {
	case "logfmt":
		if !slices.Equal(l.keys[:len(fixedLogKeys)], fixedLogKeys) {
			t.Errorf("line starts with %v, want %v", l.keys[:len(fixedLogKeys)], fixedLogKeys)
		}
	case "json":
		// go-kit's JSON encoder sorts the keys: the same order on every line.
		if !slices.IsSorted(l.keys) {
			t.Errorf("keys %v are not sorted", l.keys)
		}
		for _, k := range fixedLogKeys {
			if !slices.Contains(l.keys, k) {
				t.Errorf("line %v lacks %q", l.keys, k)
			}
		}
	}
	for _, k := range l.keys {
		if k == "time" || k == "source" {
			t.Errorf("line %v has a second timestamp or caller key %q", l.keys, k)
		}
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(l.keys)))); n != len(l.keys) {
		t.Errorf("line %v repeats a key", l.keys)
	}
	ts, _ := l.values["ts"].(string)
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") {
		t.Errorf("ts %q is not an RFC 3339 UTC time", ts)
	}
	if lvl := l.values["level"]; !slices.Contains([]any{"debug", "info", "warn", "error"}, lvl) {
		t.Errorf("level %#v is not one of debug, info, warn, error", lvl)
	}
	if c, _ := l.values["caller"].(string); !strings.Contains(c, ".go:") {
		t.Errorf("caller %q is not file.go:line", c)
	}
}

// logOfALifetime runs bin with both listeners through two reloads and a
// SIGTERM, and returns its log.
func logOfALifetime(t *testing.T, bin, format string) []logLine {
	cfg := receiverConfig(t, newStandIn(t), "a-webhook-secret-of-some-length", "")
	addr := testkit.FreeAddress(t)
	p := startProcess(t, bin, "--config.file", cfg, "--web.listen-address", addr,
		"--webhook.listen-address", testkit.FreeAddress(t), "--storage.path", "", "--log.format", format)

	testkit.Eventually(t, "both listeners", func() bool { return p.logs.Count("Listening on") == 2 })
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the SIGHUP reload", func() bool { return p.logs.Count("Reloaded on SIGHUP") == 1 })
	resp, err := http.Post("http://"+addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /-/reload: %s", resp.Status)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if n := p.logs.Count("Config reloaded"); n != 2 {
		t.Errorf("%d lines say Config reloaded, want 2", n)
	}

	var lines []logLine
	for _, raw := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		l, err := parseLogLine(format, raw)
		if err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		lines = append(lines, l)
	}
	return lines
}

func parseLogLine(format, raw string) (logLine, error) {
	l := logLine{values: map[string]any{}}
	if format == "logfmt" {
		d := logfmt.NewDecoder(strings.NewReader(raw))
		for d.ScanRecord() {
			for d.ScanKeyval() {
				l.keys = append(l.keys, string(d.Key()))
				l.values[string(d.Key())] = string(d.Value())
			}
		}
		return l, d.Err()
	}
	d := json.NewDecoder(bytes.NewReader([]byte(raw)))
	d.UseNumber()
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return l, fmt.Errorf("not a JSON object: %v", err)
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return l, err
		}
		key, _ := tok.(string)
		var v any
		if err := d.Decode(&v); err != nil {
			return l, err
		}
		l.keys = append(l.keys, key)
		l.values[key] = v
	}
	return l, nil
}
