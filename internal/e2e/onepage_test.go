// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"
)

// onePageHold is how long a page is watched for a second one: many
// evaluations (1s), Alertmanager group intervals (1s) and exporter reads
// of the address (a webhook makes it re-read at once).
const onePageHold = 8 * time.Second

// onePagePerExposure proves one page per exposure on the shipped rules and
// Alertmanager configuration: every page wakes a person, so one fact must
// be one page. The subject's feed (without a plaintext
// password since the restart scenario) reports one again: the simulator
// sends a critical webhook for it, so both signals of one exposure are
// there at once. Then:
//   - Alertmanager holds one active (not inhibited) critical alert for the
//     address, and the on-call receiver gets one page;
//   - one acknowledgement and a reload resolve all of it, the webhook
//     included (still in the look-back when it resolves): a resolved
//     notification;
//   - a change of the feed after it pages once;
//   - an acknowledgement whose handled_at is minutes in the future
//     resolves it from the reload on, and a change after that reload
//     pages again although the service stamps it before handled_at.
func (s *stack) onePagePerExposure(t *testing.T, source string) scenario {
	w := wantAlert{name: "BreachCredentialsExposed", labels: map[string]string{"address": subjectAddress, "source": source}}
	feed := subjectFeed(source, true)
	var mark int // notifications before the trigger
	return scenario{
		name: "one page per exposure",
		want: []wantAlert{w},
		trigger: func(ctx context.Context) error {
			// The restart scenario's page for the same exposure must be
			// resolved at the receiver first: an alert that fires again
			// before Alertmanager flushed its resolution is, for
			// Alertmanager, the one it notified already, and pages no one.
			if err := s.poll(ctx, deliveryTimeout, s.lastPageResolved(w)); err != nil {
				return fmt.Errorf("before the trigger: %v", err)
			}
			notified, _ := s.receiver.notifications()
			mark = len(notified)
			return s.adminPost(ctx, "/admin/feed", feed, http.StatusOK)
		},
		during: func(ctx context.Context) error {
			start := time.Now()
			// (a) Both signals, one alert, one page.
			if err := s.poll(ctx, deliveryTimeout, s.bothSignals(w)); err != nil {
				return fmt.Errorf("the exposure's two signals: %v", err)
			}
			if err := s.onePage(ctx, w, mark); err != nil {
				return err
			}
			paged := time.Since(start)

			// (b) One acknowledgement resolves all of it: the webhook
			// still counts in the look-back when it resolves, so the
			// acknowledgement closed it, not the window's end.
			if err := s.acknowledgeResolves(ctx, w, time.Now().UTC().Format(time.RFC3339Nano), s.webhookInLookBack); err != nil {
				return fmt.Errorf("acknowledged: %v", err)
			}
			if err := s.poll(ctx, deliveryTimeout, s.noCriticalHeld(w)); err != nil {
				return fmt.Errorf("acknowledged: %v", err)
			}
			resolved := time.Since(start)

			// (c) A change after the acknowledgement pages once.
			if err := s.changePagesOnce(ctx, w, feed, "e2e-onepage-after-ack"); err != nil {
				return fmt.Errorf("a change after the acknowledgement: %v", err)
			}
			repaged := time.Since(start)

			// (d) handled_at 4 minutes ahead (5 are accepted): it counts
			// from the reload, so it resolves the alert, and the next
			// change, which the service stamps before handled_at, pages.
			if err := s.acknowledgeResolves(ctx, w, time.Now().Add(4*time.Minute).UTC().Format(time.RFC3339), nil); err != nil {
				return fmt.Errorf("acknowledged ahead: %v", err)
			}
			if err := s.changePagesOnce(ctx, w, feed, "e2e-onepage-before-handled-at"); err != nil {
				return fmt.Errorf("a change after an acknowledgement with handled_at ahead: %v", err)
			}
			t.Logf("one page per exposure: paged once in %.1fs; one acknowledgement resolved it (webhook included) at %.1fs; "+
				"a change paged once at %.1fs; after handled_at 4m ahead, a change paged once at %.1fs",
				paged.Seconds(), resolved.Seconds(), repaged.Seconds(), time.Since(start).Seconds())
			return nil
		},
		// The password is rotated: the feed stops reporting it, the
		// webhook ages out of the look-back.
		clear: func(ctx context.Context) error {
			feed["plaintext"] = false
			return s.adminPost(ctx, "/admin/feed", feed, http.StatusOK)
		},
	}
}

// acknowledgeResolves writes one acknowledgement for w's address and
// feed, reloads the exporter, and waits until w resolves and the
// resolution is notified. When resolved is not nil, it must hold at the
// moment w is seen resolved.
func (s *stack) acknowledgeResolves(ctx context.Context, w wantAlert, handledAt string, resolved func(context.Context, wantAlert) error) error {
	notified, _ := s.receiver.notifications()
	mark := len(notified)
	entry := fmt.Sprintf("acknowledgements:\n  - address: %s\n    source: %s\n    handled_at: %s\n    by: e2e-onepage\n",
		w.labels["address"], w.labels["source"], handledAt)
	if err := os.WriteFile(s.exporter.ackFile, []byte(entry), 0o600); err != nil {
		return err
	}
	if err := s.reloadExporter(ctx, http.StatusOK); err != nil {
		return err
	}
	if err := s.poll(ctx, resolveTimeout, s.notActive(w)); err != nil {
		return err
	}
	if resolved != nil {
		if err := resolved(ctx, w); err != nil {
			return fmt.Errorf("resolved only when %v", err)
		}
	}
	return s.poll(ctx, deliveryTimeout, s.notifiedSince(mark, w, "resolved"))
}

// changePagesOnce adds a database to the feed (which keeps its plaintext
// password): a change, which must page for w once.
func (s *stack) changePagesOnce(ctx context.Context, w wantAlert, feed map[string]any, database string) error {
	notified, _ := s.receiver.notifications()
	mark := len(notified)
	feed["databases"] = append(slices.Clone(feed["databases"].([]string)), database)
	if err := s.adminPost(ctx, "/admin/feed", feed, http.StatusOK); err != nil {
		return err
	}
	return s.onePage(ctx, w, mark)
}

// bothSignals fails until Prometheus holds both signals of w's exposure:
// the plaintext password and a critical webhook in the look-back.
func (s *stack) bothSignals(w wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := s.plaintextRead(w)(ctx); err != nil {
			return err
		}
		return s.webhookInLookBack(ctx, w)
	}
}

// plaintextRead fails until Prometheus has scraped the plaintext password
// of w's address and feed: the exporter has read it from the API (the
// alert fires on the critical webhook alone before that).
func (s *stack) plaintextRead(w wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		got, err := s.prom.query(ctx, fmt.Sprintf(`breach_source_plaintext_password{job=%q, instance=%q, address=%q, source=%q} == 1`,
			jobName, s.webAddr, w.labels["address"], w.labels["source"]))
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("no plaintext password read for %s yet", w)
		}
		return err
	}
}

// webhookInLookBack fails unless a critical webhook for w's address and
// feed counts in the test copy's look-back.
func (s *stack) webhookInLookBack(ctx context.Context, w wantAlert) error {
	got, err := s.prom.query(ctx, fmt.Sprintf(`increase(breach_alerts_total{job=%q, instance=%q, severity="critical", address=%q, source=%q}[%s]) > 0`,
		jobName, s.webAddr, w.labels["address"], w.labels["source"], testLookBack))
	if err == nil && len(got) == 0 {
		err = fmt.Errorf("no critical webhook in the last %s", testLookBack)
	}
	return err
}

// onePage waits for a page of w (a firing notification to the critical
// receiver since the mark-th), then watches for onePageHold: Alertmanager
// must hold w as the address's only critical alert, active (not
// inhibited or silenced), and no second page may come.
func (s *stack) onePage(ctx context.Context, w wantAlert, mark int) error {
	pages := func() []notification {
		notified, _ := s.receiver.notifications()
		var out []notification
		for _, n := range notified[mark:] {
			if n.Receiver == criticalReceiver && n.GroupLabels["address"] == w.labels["address"] && n.Status == "firing" {
				out = append(out, n)
			}
		}
		return out
	}
	err := s.poll(ctx, defaultFireTimeout+deliveryTimeout, func(context.Context) error {
		if len(pages()) == 0 {
			return fmt.Errorf("no page for %s yet", w)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return holds(ctx, onePageHold, func(ctx context.Context) error {
		held, err := s.am.alerts(ctx)
		if err != nil {
			return err
		}
		var critical []amAlert
		for _, a := range held {
			if a.Labels["severity"] == "critical" && a.Labels["address"] == w.labels["address"] {
				critical = append(critical, a)
			}
		}
		if len(critical) != 1 || !s.matches(w, critical[0].Labels) || critical[0].Status.State != "active" {
			return fmt.Errorf("Alertmanager holds %+v as the critical alerts of %s, want %s alone and active", critical, w.labels["address"], w)
		}
		if got := pages(); len(got) != 1 || len(got[0].Alerts) != 1 || !s.matches(w, got[0].Alerts[0].Labels) {
			return fmt.Errorf("pages for %s: %+v, want one, of %s alone", w.labels["address"], got, w)
		}
		return nil
	})
}

// holds calls check every pollInterval for hold, and returns its first
// error: what must stay true (no second page) while it could break.
func holds(ctx context.Context, hold time.Duration, check func(context.Context) error) error {
	until := time.Now().Add(hold)
	for {
		if err := check(ctx); err != nil {
			return err
		}
		if time.Now().After(until) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// noCriticalHeld fails while Alertmanager holds a critical alert for w's
// address.
func (s *stack) noCriticalHeld(w wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		held, err := s.am.alerts(ctx)
		if err != nil {
			return err
		}
		for _, a := range held {
			if a.Labels["severity"] == "critical" && a.Labels["address"] == w.labels["address"] {
				return fmt.Errorf("Alertmanager still holds %v (%s)", a.Labels, a.Status.State)
			}
		}
		return nil
	}
}

// lastPageResolved holds while the critical receiver's last notification
// for w's address, if any, says resolved.
func (s *stack) lastPageResolved(w wantAlert) func(context.Context) error {
	return func(context.Context) error {
		notified, _ := s.receiver.notifications()
		for i := len(notified) - 1; i >= 0; i-- {
			n := notified[i]
			if n.Receiver != criticalReceiver || n.GroupLabels["address"] != w.labels["address"] {
				continue
			}
			if n.Status != "resolved" {
				return fmt.Errorf("the last page for %s is %s at the receiver, not resolved", w, n.Status)
			}
			return nil
		}
		return nil
	}
}
