// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The receivers of examples/alertmanager.yml the owners scenarios check: the
// one templated receiver of every team's alerts, and the central one of
// info alerts (the fallback's, for an alert without a team).
const (
	teamReceiver = "team"
	infoReceiver = "ops-daily"
)

// ownerGroup is one group of a source of addresses in Prometheus' file_sd
// shape: its addresses and their owner labels.
type ownerGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// ownerSource is a source of addresses with owner labels the exporter
// watches. The owners scenarios run on every source of the table
// (ownerSources): each has its own addresses, and every check runs for
// each.
type ownerSource struct {
	name string
	// dir is the directory the glob of a file source reads, url the
	// address of an HTTP source; "" for the other kind.
	dir, url string
	// configure adds the source to the exporter's configuration.
	configure func(cfg yamlMap)
	// publish makes the source list exactly groups, as its owner would
	// (a directory export rewriting a file); the exporter must follow
	// without a reload.
	publish func(groups []ownerGroup) error
}

// ownerSources are the sources of owner labels under test, their state
// under dir.
func ownerSources(t *testing.T, dir string) []ownerSource {
	t.Helper()
	return []ownerSource{sdFileSource(t, filepath.Join(dir, "owners")), httpSource(t)}
}

// httpSource is addresses_http: a server of the test on loopback, as a
// directory team's export would serve it, which the exporter asks every
// second. Until the first publish it answers an empty list, which the
// exporter counts as a failure and ignores (nothing to keep yet):
// BreachExporterAddressURLFailing fires for it until then
// (addressURLFailing).
func httpSource(t *testing.T) ownerSource {
	t.Helper()
	var mu sync.Mutex
	body := []byte("[]")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	url := srv.URL + "/owners.json"
	return ownerSource{
		name: "http",
		url:  url,
		configure: func(cfg yamlMap) {
			cfg["addresses_http"] = []any{yamlMap{"url": url, "refresh_interval": "1s"}}
		},
		publish: func(groups []ownerGroup) error {
			data, err := json.Marshal(groups)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			body = data
			return nil
		},
	}
}

// sdFileSource is addresses_sd_files: one JSON file in dir, which the glob
// matches only from the first publish on (an empty directory before), and
// which publish replaces whole (a rename, as a careful export script does).
func sdFileSource(t *testing.T, dir string) ownerSource {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return ownerSource{
		name: "file",
		dir:  dir,
		configure: func(cfg yamlMap) {
			cfg["addresses_sd_files"] = []any{filepath.Join(dir, "*.json")}
		},
		publish: func(groups []ownerGroup) error {
			data, err := json.Marshal(groups)
			if err != nil {
				return err
			}
			return replaceFile(filepath.Join(dir, "owners.json"), data)
		},
	}
}

// replaceFile writes data to path whole: a temporary file the sources'
// *.json glob does not match, renamed over path.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ownerSourceNamed is the owners' source called name.
func (s *stack) ownerSourceNamed(t *testing.T, name string) ownerSource {
	t.Helper()
	i := slices.IndexFunc(s.owners, func(o ownerSource) bool { return o.name == name })
	if i < 0 {
		t.Fatalf("no owners' source %q", name)
	}
	return s.owners[i]
}

// configureOwnerSources adds every source to the exporter's configuration
// file.
func configureOwnerSources(t *testing.T, file string, sources []ownerSource) {
	t.Helper()
	cfg := readYAML(t, file)
	for _, src := range sources {
		src.configure(cfg)
	}
	writeYAML(t, file, cfg)
}

// owned are the addresses a source lists in the owners scenarios: one of
// each team, one without an owner. payments moves to platform during the
// routing scenario.
type owned struct {
	src                         ownerSource
	payments, platform, unowned string
}

func ownedBy(src ownerSource) owned {
	at := func(role string) string { return role + "-" + src.name + "@example.com" }
	return owned{src: src, payments: at("payments"), platform: at("platform"), unowned: at("unowned")}
}

// groups is what the source lists: payments in team paymentsTeam
// (payments, or platform after the move), platform in platform, unowned
// without labels unless unownedTeam is set.
func (o owned) groups(paymentsTeam, unownedTeam string) []ownerGroup {
	g := []ownerGroup{
		{Targets: []string{o.payments}, Labels: map[string]string{"team": paymentsTeam, "owner": "jdoe"}},
		{Targets: []string{o.platform}, Labels: map[string]string{"team": "platform"}},
		{Targets: []string{o.unowned}},
	}
	if unownedTeam != "" {
		g[2].Labels = map[string]string{"team": unownedTeam}
	}
	return g
}

// The feeds of the owners' exposures: the first page comes from ownersFeed,
// the page after the move from movedFeed (another alert: source differs).
const (
	ownersFeed = "index"
	movedFeed  = "archive"
)

// ownersFeedState is an owner address's feed: one database, and either
// the username alone or the password too, in plaintext (exposed). Set up
// without the password: a password newly exposed is a critical alert, so
// only the trigger may show it.
func ownersFeedState(address, source string, exposed bool) map[string]any {
	fields := []string{"username"}
	if exposed {
		fields = append(fields, "password")
	}
	return map[string]any{
		"email": address, "source": source,
		"databases": []string{"e2e-owners-2020"}, "fields": fields, "plaintext": exposed,
	}
}

// ownersScenarios proves routing by owner on the shipped rules and example
// Alertmanager configuration, for every source of owner labels:
//   - URL failing: the HTTP source's alert, firing since the start,
//     resolves at the first publish of the sources (addressURLFailing);
//   - routing: an exposure of an address of each team reaches the team
//     receiver once, grouped under its team and with its team label; one
//     of an address without an owner reaches the fallback (the on-call
//     receiver) once, without a team; after its owner moves the address to
//     another team in the source (no reload, no restart), its next page
//     reaches the new team once and the old team not at all;
//   - unowned: BreachAddressUnowned is one alert for all the addresses
//     without a team (its value their number), notified to the info
//     receiver; giving each a team resolves it.
func (s *stack) ownersScenarios(t *testing.T) []scenario {
	var all []owned
	for _, src := range s.owners {
		all = append(all, ownedBy(src))
	}
	exposure := func(address, source, team string) wantAlert {
		l := map[string]string{"address": address, "source": source}
		if team != "" {
			l["team"] = team
		}
		return wantAlert{name: "BreachCredentialsExposed", labels: l}
	}
	// handled are the pages the team acknowledges before the move; rest
	// the others, acknowledged at the end.
	var firstPages, handled, rest []wantAlert
	for _, o := range all {
		handled = append(handled, exposure(o.payments, ownersFeed, "payments"))
		rest = append(rest, exposure(o.platform, ownersFeed, "platform"), exposure(o.unowned, ownersFeed, ""))
	}
	firstPages = append(slices.Clone(handled), rest...)
	var movedPages []wantAlert
	for _, o := range all {
		movedPages = append(movedPages, exposure(o.payments, movedFeed, "platform"))
	}
	var mark int // notifications before the trigger
	routing := scenario{
		name: "pages routed by owner",
		want: firstPages,
		// The sources were published by urlFailing's clear.
		trigger: func(ctx context.Context) error {
			notified, _ := s.receiver.notifications()
			mark = len(notified)
			for _, w := range firstPages {
				if err := s.adminPost(ctx, "/admin/feed", ownersFeedState(w.labels["address"], ownersFeed, true), http.StatusOK); err != nil {
					return err
				}
			}
			return nil
		},
		during: func(ctx context.Context) error {
			if err := s.pagedOnce(ctx, firstPages, mark); err != nil {
				return fmt.Errorf("first pages: %v", err)
			}
			// The team handles its page: acknowledged, it resolves.
			if err := s.acknowledge(ctx, handled); err != nil {
				return err
			}
			for _, w := range handled {
				if err := s.poll(ctx, resolveTimeout, s.notActive(w)); err != nil {
					return fmt.Errorf("acknowledged: %v", err)
				}
			}
			// The address moves to platform in its source (the reload
			// above came before: the exporter sees the move by itself);
			// its next exposure pages platform.
			if err := s.publishOwners(ctx, t, all, "platform"); err != nil {
				return err
			}
			notified, _ := s.receiver.notifications()
			moved := len(notified)
			for _, w := range movedPages {
				if err := s.adminPost(ctx, "/admin/feed", ownersFeedState(w.labels["address"], movedFeed, true), http.StatusOK); err != nil {
					return err
				}
			}
			if err := s.poll(ctx, defaultFireTimeout, s.firingAll(movedPages)); err != nil {
				return fmt.Errorf("after the move: %v", err)
			}
			if err := s.pagedOnce(ctx, movedPages, moved); err != nil {
				return fmt.Errorf("after the move: %v", err)
			}
			return nil
		},
		// Every exposure is handled: acknowledged, they resolve at once.
		clear: func(ctx context.Context) error {
			return s.acknowledge(ctx, append(slices.Clone(rest), movedPages...))
		},
	}

	unownedAlert := wantAlert{name: "BreachAddressUnowned"}
	unowned := scenario{
		name: "addresses without a team",
		want: []wantAlert{unownedAlert},
		// Since the start: the demo's addresses have no owner, and each
		// source lists one without.
		during: func(ctx context.Context) error {
			return s.unownedOnce(ctx, unownedAlert, len(s.exporter.addresses)+len(all))
		},
		// Every address gets a team: the config's in their entries, the
		// sources' in their groups.
		clear: func(ctx context.Context) error {
			if err := s.giveConfigAddressesTeam("security"); err != nil {
				return err
			}
			for _, o := range all {
				if err := o.src.publish(o.groups("platform", "platform")); err != nil {
					return err
				}
			}
			return s.reloadExporter(ctx, http.StatusOK)
		},
	}
	urlFailing := s.addressURLFailing(t, func(ctx context.Context) error {
		if err := s.setUpOwners(ctx, all); err != nil {
			return err
		}
		return s.publishOwners(ctx, t, all, "payments")
	})
	return []scenario{urlFailing, routing, unowned}
}

// setUpOwners puts the owners' addresses on the simulated account,
// verified, both feeds scanned without the password, before the exporter
// watches them: its first answer is then the baseline, not news. (The
// first scan is a warning alert, which makes the exporter discover the
// address: the sources then take it over, with their labels.)
func (s *stack) setUpOwners(ctx context.Context, all []owned) error {
	for _, o := range all {
		for _, address := range []string{o.payments, o.platform, o.unowned} {
			if err := s.adminPost(ctx, "/admin/address", map[string]string{"email": address, "state": "verified"}, http.StatusNoContent); err != nil {
				return err
			}
			for _, feed := range []string{ownersFeed, movedFeed} {
				// The first scan makes an alert: 200 with it.
				if err := s.adminPost(ctx, "/admin/feed", ownersFeedState(address, feed, false), http.StatusOK); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// publishOwners has every source publish its groups with payments in
// paymentsTeam, and waits
// until the exporter's /metrics, then Prometheus, show each address's
// breach_address_info with its team. It logs how long each took: the time
// from a changed source to the changed series.
func (s *stack) publishOwners(ctx context.Context, t *testing.T, all []owned, paymentsTeam string) error {
	type want struct{ address, team string }
	var wants []want
	for _, o := range all {
		wants = append(wants, want{o.payments, paymentsTeam}, want{o.platform, "platform"}, want{o.unowned, ""})
	}
	start := time.Now()
	for _, o := range all {
		if err := o.src.publish(o.groups(paymentsTeam, "")); err != nil {
			return fmt.Errorf("%s source: %v", o.src.name, err)
		}
	}
	err := s.poll(ctx, dataTimeout, func(ctx context.Context) error {
		for _, w := range wants {
			if err := s.servesInfo(ctx, w.address, w.team); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	served := time.Since(start)
	err = s.poll(ctx, dataTimeout, func(ctx context.Context) error {
		for _, w := range wants {
			got, err := s.prom.query(ctx, fmt.Sprintf(`breach_address_info{job=%q, address=%q, team=%q}`, jobName, w.address, w.team))
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("breach_address_info of %s with team %q: %d series in Prometheus, want 1", w.address, w.team, len(got))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.Logf("owners (payments in team %s): on the exporter's /metrics %.1fs after the sources changed, in Prometheus %.1fs after",
		paymentsTeam, served.Seconds(), time.Since(start).Seconds())
	return nil
}

// servesInfo fails unless the exporter's /metrics has address's
// breach_address_info with team (none when team is empty).
func (s *stack) servesInfo(ctx context.Context, address, team string) error {
	body, err := getBody(ctx, "http://"+s.webAddr+"/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "breach_address_info{") || !strings.Contains(line, fmt.Sprintf(`address=%q`, address)) {
			continue
		}
		hasTeam := strings.Contains(line, "team=")
		if (team == "" && !hasTeam) || strings.Contains(line, fmt.Sprintf(`team=%q`, team)) {
			return nil
		}
		return fmt.Errorf("/metrics serves %s, want team %q", line, team)
	}
	return fmt.Errorf("/metrics serves no breach_address_info of %s", address)
}

// firingAll fails until every one of wants fires in Prometheus.
func (s *stack) firingAll(wants []wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		for _, w := range wants {
			if !slices.ContainsFunc(active, func(a activeAlert) bool { return a.State == "firing" && s.matches(w, a.Labels) }) {
				return fmt.Errorf("%s not firing yet", w)
			}
		}
		return nil
	}
}

// pagedOnce waits until each of wants was notified firing since the
// mark-th notification, then watches for onePageHold: each must be
// notified exactly once, to the team receiver grouped under its team label
// when it has one, else to the on-call receiver without a team.
func (s *stack) pagedOnce(ctx context.Context, wants []wantAlert, mark int) error {
	pages := func(w wantAlert) []delivery {
		notified, _ := s.receiver.notifications()
		var out []delivery
		for _, d := range firing(notified[mark:], w.name) {
			if d.labels["address"] == w.labels["address"] && d.labels["source"] == w.labels["source"] {
				out = append(out, d)
			}
		}
		return out
	}
	err := s.poll(ctx, deliveryTimeout, func(context.Context) error {
		for _, w := range wants {
			if len(pages(w)) == 0 {
				return fmt.Errorf("no page for %s yet", w)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return holds(ctx, onePageHold, func(context.Context) error {
		for _, w := range wants {
			got := pages(w)
			if len(got) != 1 {
				return fmt.Errorf("%d pages for %s, want 1: %+v", len(got), w, got)
			}
			if err := routedTo(got[0], w.labels["team"]); err != nil {
				return fmt.Errorf("%s: %v", w, err)
			}
		}
		return nil
	})
}

// routedTo checks that d reached the owning team's receiver, grouped under
// team, or the fallback without a team when team is empty.
func routedTo(d delivery, team string) error {
	wantReceiver, wantPath := teamReceiver, "/notifications/"+teamReceiver
	if team == "" {
		wantReceiver, wantPath = criticalReceiver, "/notifications/"+criticalReceiver
	}
	switch {
	case d.receiver != wantReceiver || d.path != wantPath:
		return fmt.Errorf("reached receiver %q at %s, want %q at %s", d.receiver, d.path, wantReceiver, wantPath)
	case d.labels["team"] != team:
		return fmt.Errorf("notified with team %q, want %q", d.labels["team"], team)
	case d.groupLabels["team"] != team || d.groupLabels["address"] != d.labels["address"]:
		return fmt.Errorf("grouped by %v, want the team %q and the address", d.groupLabels, team)
	}
	return nil
}

// acknowledge adds one acknowledgement for each of ws's address and feed to
// the file (the other scenarios' stay), and reloads the exporter.
func (s *stack) acknowledge(ctx context.Context, ws []wantAlert) error {
	var file struct {
		Acknowledgements []yamlMap `yaml:"acknowledgements"`
	}
	data, err := os.ReadFile(s.exporter.ackFile)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return fmt.Errorf("%s: %v", s.exporter.ackFile, err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, w := range ws {
		file.Acknowledgements = append(file.Acknowledgements, yamlMap{
			"address": w.labels["address"], "source": w.labels["source"], "handled_at": now, "by": "e2e-owners",
		})
	}
	if data, err = yaml.Marshal(file); err != nil {
		return err
	}
	if err := os.WriteFile(s.exporter.ackFile, data, 0o600); err != nil {
		return err
	}
	return s.reloadExporter(ctx, http.StatusOK)
}

// unownedOnce checks that w, BreachAddressUnowned, is one alert whose value
// is the number of addresses without a team (count), held once by
// Alertmanager, and notified only to the info receiver, always as that one
// alert, without an address.
func (s *stack) unownedOnce(ctx context.Context, w wantAlert, count int) error {
	return s.poll(ctx, deliveryTimeout, func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		var ours []activeAlert
		for _, a := range active {
			if a.Labels["alertname"] == w.name {
				ours = append(ours, a)
			}
		}
		if len(ours) != 1 || !s.matches(w, ours[0].Labels) {
			return permanent{fmt.Errorf("Prometheus holds %+v, want one %s", ours, w)}
		}
		if v, err := strconv.ParseFloat(ours[0].Value, 64); err != nil || v != float64(count) {
			return fmt.Errorf("%s has value %s, want %d addresses without a team", w, ours[0].Value, count)
		}
		held, err := s.am.alerts(ctx)
		if err != nil {
			return err
		}
		if n := len(slices.DeleteFunc(held, func(a amAlert) bool { return a.Labels["alertname"] != w.name })); n != 1 {
			return permanent{fmt.Errorf("Alertmanager holds %d %s alerts, want 1", n, w.name)}
		}
		notified, _ := s.receiver.notifications()
		got := firing(notified, w.name)
		if len(got) == 0 {
			return fmt.Errorf("the %s receiver has no %s yet", infoReceiver, w)
		}
		for _, d := range got {
			if d.receiver != infoReceiver || !maps.Equal(d.labels, got[0].labels) || d.labels["address"] != "" {
				return permanent{fmt.Errorf("%s notified as %v to %s, and as %v to %s: want one alert without an address, to %s",
					w.name, got[0].labels, got[0].receiver, d.labels, d.receiver, infoReceiver)}
			}
		}
		return nil
	})
}

// giveConfigAddressesTeam gives every address of the exporter's config
// labels: {team: team}, keeping the rest of its entry.
func (s *stack) giveConfigAddressesTeam(team string) error {
	data, err := os.ReadFile(s.exporterFile)
	if err != nil {
		return err
	}
	cfg := yamlMap{}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return err
	}
	list, ok := cfg["addresses"].([]any)
	if !ok {
		return fmt.Errorf("%s: addresses is not a list", s.exporterFile)
	}
	for i, a := range list {
		entry, ok := a.(yamlMap)
		if !ok {
			entry = yamlMap{"email": a}
		}
		entry["labels"] = yamlMap{"team": team}
		list[i] = entry
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(s.exporterFile, out, 0o600)
}
