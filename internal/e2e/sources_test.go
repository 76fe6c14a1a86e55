// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// opsReceiver is where examples/alertmanager.yml sends a warning about no
// address with a team: the alerts about one exporter process among them.
const opsReceiver = "ops"

// The alerts of an address source that fails (its last good list stays).
const (
	fileFailing = "BreachExporterAddressFileFailing"
	urlFailing  = "BreachExporterAddressURLFailing"
)

// addressFileFailing breaks an address file and fixes it: a file the
// owners' glob matches, with no usable list, which the exporter reads at
// once (the directory's event) and never again until it changes, so that
// only breach_exporter_address_file_up shows it broken all along. Fixed,
// it lists an address the config has already (a duplicate: nothing new to
// watch for the scenarios beside it), the alert resolves at that read,
// and the file goes again, leaving the owners' directory empty for their
// scenarios.
func (s *stack) addressFileFailing(t *testing.T) scenario {
	file := filepath.Join(s.ownerSourceNamed(t, "file").dir, "e2e-broken.json")
	w := wantAlert{name: fileFailing, labels: map[string]string{"file": file}}
	return scenario{
		name: "address file failing",
		want: []wantAlert{w},
		trigger: func(context.Context) error {
			return replaceFile(file, []byte(`[{"targets": [`))
		},
		during: func(ctx context.Context) error {
			return s.poll(ctx, deliveryTimeout, s.perProcessNotified(w, "firing", 0))
		},
		clear: func(ctx context.Context) error {
			notified, _ := s.receiver.notifications()
			mark := len(notified)
			if err := replaceFile(file, fmt.Appendf(nil, `[{"targets": [%q]}]`, subjectAddress)); err != nil {
				return err
			}
			if err := s.poll(ctx, resolveTimeout, s.notActive(w)); err != nil {
				return fmt.Errorf("fixed: %v", err)
			}
			if err := s.poll(ctx, deliveryTimeout, s.perProcessNotified(w, "resolved", mark)); err != nil {
				return fmt.Errorf("fixed: %v", err)
			}
			return os.Remove(file)
		},
	}
}

// addressURLFailing is the owners' HTTP source failing since the start: it
// answers no address until publish (the owners' first publish, which sets
// their addresses up first) gives it its list; the alert resolves then.
func (s *stack) addressURLFailing(t *testing.T, publish func(context.Context) error) scenario {
	w := wantAlert{name: urlFailing, labels: map[string]string{"url": s.ownerSourceNamed(t, "http").url}}
	return scenario{
		name: "address URL failing",
		want: []wantAlert{w},
		during: func(ctx context.Context) error {
			return s.poll(ctx, deliveryTimeout, s.perProcessNotified(w, "firing", 0))
		},
		clear: func(ctx context.Context) error {
			notified, _ := s.receiver.notifications()
			mark := len(notified)
			if err := publish(ctx); err != nil {
				return err
			}
			if err := s.poll(ctx, resolveTimeout, s.notActive(w)); err != nil {
				return fmt.Errorf("published: %v", err)
			}
			if err := s.poll(ctx, deliveryTimeout, s.perProcessNotified(w, "resolved", mark)); err != nil {
				return fmt.Errorf("published: %v", err)
			}
			return nil
		},
	}
}

// perProcessNotified fails until the webhook receiver got w with status
// since its mark-th notification, and for good when one of those went
// elsewhere than to the ops receiver grouped by job and alert name: where
// examples/alertmanager.yml sends a warning about one exporter process
// (it has instance and no team), so that N replicas failing alike are one
// notification.
func (s *stack) perProcessNotified(w wantAlert, status string, mark int) func(context.Context) error {
	return func(context.Context) error {
		notified, _ := s.receiver.notifications()
		got := slices.DeleteFunc(withStatus(notified[mark:], w.name, status), func(d delivery) bool { return !s.matches(w, d.labels) })
		if len(got) == 0 {
			return fmt.Errorf("the webhook receiver has no %s %s yet", status, w)
		}
		group := map[string]string{"job": jobName, "alertname": w.name}
		for _, d := range got {
			if d.receiver != opsReceiver || d.path != "/notifications/"+opsReceiver || !maps.Equal(d.groupLabels, group) {
				return permanent{fmt.Errorf("%s %s reached receiver %q at %s grouped by %v, want %q grouped by %v",
					status, w, d.receiver, d.path, d.groupLabels, opsReceiver, group)}
			}
		}
		return nil
	}
}
