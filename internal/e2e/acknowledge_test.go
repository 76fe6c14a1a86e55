// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// acknowledgedLifecycle takes w, a plaintext password alert firing and
// notified, through its lifecycle: an acknowledgement plus a reload
// resolves it (a resolved notification); a reload with a bad file answers
// 500 and keeps the acknowledgement in force; an exporter restart does not
// bring it back; a change the feed reports after handled_at pages again.
// It returns with w firing.
func (s *stack) acknowledgedLifecycle(ctx context.Context, t *testing.T, w wantAlert) error {
	address, source := w.labels["address"], w.labels["source"]
	// restartKeepsAlert left the API failing for the address.
	if err := s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "", "email": address}, http.StatusNoContent); err != nil {
		return err
	}
	notified, _ := s.receiver.notifications()
	mark := len(notified)

	// Everything the feed reported up to now is handled.
	good := fmt.Sprintf("acknowledgements:\n  - address: %s\n    source: %s\n    handled_at: %s\n    by: e2e-oncall\n    comment: password rotated\n",
		address, source, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(s.exporter.ackFile, []byte(good), 0o600); err != nil {
		return err
	}
	start := time.Now()
	if err := s.reloadExporter(ctx, http.StatusOK); err != nil {
		return err
	}
	if err := s.poll(ctx, resolveTimeout, s.notActive(w)); err != nil {
		return fmt.Errorf("acknowledged: %v", err)
	}
	if err := s.poll(ctx, deliveryTimeout, s.notifiedSince(mark, w, "resolved")); err != nil {
		return fmt.Errorf("acknowledged: %v", err)
	}
	resolved := time.Since(start)

	// A bad file: the reload fails, the acknowledgement stays in force.
	ackSeries := fmt.Sprintf(`breach_source_acknowledged_timestamp_seconds{address=%q,source=%q,by="e2e-oncall",comment="password rotated"}`, address, source)
	bad := strings.Replace(good, "comment:", "coment:", 1)
	if err := os.WriteFile(s.exporter.ackFile, []byte(bad), 0o600); err != nil {
		return err
	}
	if err := s.reloadExporter(ctx, http.StatusInternalServerError); err != nil {
		return fmt.Errorf("reload with a bad acknowledgements file: %v", err)
	}
	if err := s.servesSeries(ctx, ackSeries); err != nil {
		return fmt.Errorf("after the failed reload: %v", err)
	}
	if err := os.WriteFile(s.exporter.ackFile, []byte(good), 0o600); err != nil {
		return err
	}
	if err := s.reloadExporter(ctx, http.StatusOK); err != nil {
		return err
	}

	// A restart while acknowledged: no scrape for a moment, the
	// acknowledgements read again at start; the alert stays resolved.
	notified, _ = s.receiver.notifications()
	mark = len(notified)
	if err := s.runningExporter().stopNow(); err != nil {
		return err
	}
	stopped := time.Now()
	if err := s.tryStartExporter(ctx, t, "exporter-acknowledged"); err != nil {
		return err
	}
	if err := s.poll(ctx, 15*time.Second, func(ctx context.Context) error { return s.servesSeries(ctx, ackSeries) }); err != nil {
		return fmt.Errorf("after the restart: %v", err)
	}
	lookBack, _ := time.ParseDuration(testLookBack)
	holdUntil := stopped.Add(lookBack + 5*time.Second)
	looks := 0
	for time.Now().Before(holdUntil) {
		if err := s.notActive(w)(ctx); err != nil {
			return fmt.Errorf("acknowledged, across a restart: %v", err)
		}
		looks++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	notified, _ = s.receiver.notifications()
	if slices.ContainsFunc(firing(notified[mark:], w.name), func(d delivery) bool { return s.matches(w, d.labels) }) {
		return fmt.Errorf("acknowledged, the webhook receiver got a firing %s across a restart", w)
	}

	// The feed reports a change after handled_at: a database more.
	feed := subjectFeed(source, true)
	feed["databases"] = append(slices.Clone(feed["databases"].([]string)), "e2e-later-2026")
	changed := time.Now()
	if err := s.adminPost(ctx, "/admin/feed", feed, http.StatusOK); err != nil {
		return err
	}
	if err := s.poll(ctx, defaultFireTimeout+deliveryTimeout, s.notifiedSince(mark, w, "firing")); err != nil {
		return fmt.Errorf("after a change of the feed: %v", err)
	}
	t.Logf("lifecycle: acknowledged and resolved (notified) in %.1fs; a bad file's reload answered 500 and kept it; "+
		"no alert across a restart at %d looks; the feed's change paged again in %.1fs",
		resolved.Seconds(), looks, time.Since(changed).Seconds())
	return nil
}

// notActive fails while w is pending or firing in Prometheus.
func (s *stack) notActive(w wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(active, func(a activeAlert) bool { return s.matches(w, a.Labels) }); i >= 0 {
			return fmt.Errorf("%s is %s", w, active[i].State)
		}
		return nil
	}
}

// notifiedSince fails until the webhook receiver got w with status since
// its mark-th notification.
func (s *stack) notifiedSince(mark int, w wantAlert, status string) func(context.Context) error {
	return func(context.Context) error {
		notified, _ := s.receiver.notifications()
		if !slices.ContainsFunc(withStatus(notified[mark:], w.name, status), func(d delivery) bool { return s.matches(w, d.labels) }) {
			return fmt.Errorf("the webhook receiver has no %s %s yet", status, w)
		}
		return nil
	}
}

// servesSeries fails unless the exporter's /metrics has a line starting
// with series.
func (s *stack) servesSeries(ctx context.Context, series string) error {
	body, err := getBody(ctx, s.webURL("/metrics"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return nil
		}
	}
	return fmt.Errorf("/metrics does not serve %s", series)
}
