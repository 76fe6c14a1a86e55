// SPDX-License-Identifier: Apache-2.0

// Package testkit holds the helpers that several packages' tests share:
// the service's stand-in served for a test (StandIn, the simulator on a
// loopback port), driving a fake clock until a
// condition holds (AdvanceUntil), reading samples out of a registry,
// polling with a deadline, and files and buffers safe for the goroutines
// under test. Only tests import it; of this module's packages it imports
// internal/breach, internal/config and the simulator (which imports
// internal/breach alone), so that any other package's tests may import it.
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
)

// Samples gathers g and indexes every gauge, counter and untyped sample by
// Series key. Histograms are left out: no test compares them by value.
func Samples(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return Flatten(families)
}

// Flatten indexes the samples of families as Samples does.
func Flatten(families []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			out[Key(mf.GetName(), m.GetLabel())] = v
		}
	}
	return out
}

// Key is the index of one sample: its name and its label pairs, sorted.
func Key(name string, labels []*dto.LabelPair) string {
	pairs := make([]string, 0, len(labels))
	for _, l := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return join(name, pairs)
}

// Series is the Key of a sample given as alternating label names and values.
func Series(name string, labels ...string) string {
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	return join(name, pairs)
}

func join(name string, pairs []string) string {
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Eventually polls cond until it holds, failing the test after a minute:
// far longer than any condition takes on an idle machine, so that a
// loaded one (-race, other tests beside it) fails no test that is right.
// The poll interval is not synchronisation: cond decides.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WriteFile writes a private file or fails the test.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SyncBuffer is a bytes.Buffer that loggers in several goroutines may share.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many lines contain all of the given parts.
func (b *SyncBuffer) Count(parts ...string) int {
	n := 0
lines:
	for _, line := range strings.Split(b.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		n++
	}
	return n
}

// Addresses are configured addresses with the given emails and no alias.
func Addresses(emails ...string) []breach.Address {
	out := make([]breach.Address, len(emails))
	for i, e := range emails {
		out[i] = breach.Address{Email: e}
	}
	return out
}

// AllDetailYAML is the config block that switches every detail family on,
// for tests that follow every family.
func AllDetailYAML() string {
	return "metrics:\n  detail_families: [" + strings.Join(config.DetailFamilies, ", ") + "]\n"
}
