// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The example configurations are parsed and only what must differ on a test
// machine is changed (ports, file paths, intervals), so what runs is what
// users copy.

// go.yaml.in/yaml/v3 decodes every mapping with string keys into this type.
type yamlMap = map[string]any

func readYAML(t *testing.T, path string) yamlMap {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := yamlMap{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// mapAt returns the mapping under key, failing with the file and key when
// the example's structure changed.
func mapAt(t *testing.T, file string, m yamlMap, key string) yamlMap {
	t.Helper()
	return valueAt[yamlMap](t, file, m, key, "a mapping")
}

// valueAt returns the value under key as a T, failing with the file and key
// when it is not what (a mapping, a string).
func valueAt[T any](t *testing.T, file string, m yamlMap, key, what string) T {
	t.Helper()
	v, ok := m[key].(T)
	if !ok {
		t.Fatalf("%s: %q is not %s", file, key, what)
	}
	return v
}

// mapsAt returns the list of mappings under key.
func mapsAt(t *testing.T, file string, m yamlMap, key string) []yamlMap {
	t.Helper()
	list, ok := m[key].([]any)
	if !ok {
		t.Fatalf("%s: %q is not a list", file, key)
	}
	maps := make([]yamlMap, len(list))
	for i, item := range list {
		if maps[i], ok = item.(yamlMap); !ok {
			t.Fatalf("%s: %q[%d] is not a mapping", file, key, i)
		}
	}
	return maps
}

func stringAt(t *testing.T, file string, m yamlMap, key string) string {
	t.Helper()
	return valueAt[string](t, file, m, key, "a string")
}

// absolute resolves a path of a config file as its program does: relative to
// the file's directory.
func absolute(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// withHost keeps raw's scheme and path and points it at host.
func withHost(t *testing.T, file, raw, host string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("%s: %q is not an absolute URL", file, raw)
	}
	u.Host = host
	return u.String()
}

// exporterSetup is what the rest of the test needs from the exporter's
// configuration.
type exporterSetup struct {
	apiBase    string   // base_url, pointed at the simulator
	tokenFile  string   // the API token the simulator must accept (a copy the test may rotate)
	secretFile string   // the webhook secret the simulator must sign with
	addresses  []string // configured emails
	ackFile    string   // acknowledgements_file, absolute; empty at the start
}

// subjectAddress is added to the demo's addresses for the alert scenarios:
// the test sets its feeds through the simulator's controls, and sweeps leave
// it alone.
const subjectAddress = "subject@example.com"

// exporterConfig derives the exporter's configuration: the API of the
// simulator at simAddr, a copy of the token next to out (the test rotates
// it), absolute secret paths, subjectAddress, and refresh intervals short
// enough to re-read within the test.
func exporterConfig(t *testing.T, examples, out, simAddr string) exporterSetup {
	t.Helper()
	file := filepath.Join(examples, "breach_exporter.yml")
	cfg := readYAML(t, file)
	var setup exporterSetup
	api := mapAt(t, file, cfg, "api")
	setup.apiBase = withHost(t, file, stringAt(t, file, api, "base_url"), simAddr)
	token, err := os.ReadFile(absolute(examples, stringAt(t, file, api, "token_file")))
	if err != nil {
		t.Fatal(err)
	}
	setup.tokenFile = filepath.Join(filepath.Dir(out), "api_token")
	if err := os.WriteFile(setup.tokenFile, token, 0o600); err != nil {
		t.Fatal(err)
	}
	api["base_url"], api["token_file"] = setup.apiBase, setup.tokenFile

	hook := mapAt(t, file, cfg, "webhook")
	secrets, ok := hook["secret_files"].([]any)
	if !ok || len(secrets) == 0 {
		t.Fatalf("%s: webhook.secret_files is not a non-empty list", file)
	}
	for i, s := range secrets {
		path, ok := s.(string)
		if !ok {
			t.Fatalf("%s: webhook.secret_files[%d] is not a string", file, i)
		}
		secrets[i] = absolute(examples, path)
	}
	setup.secretFile = secrets[0].(string)

	list, ok := cfg["addresses"].([]any)
	if !ok {
		t.Fatalf("%s: addresses is not a list", file)
	}
	for i, a := range list {
		switch a := a.(type) {
		case string:
			setup.addresses = append(setup.addresses, a)
		case yamlMap:
			setup.addresses = append(setup.addresses, stringAt(t, file, a, "email"))
		default:
			t.Fatalf("%s: addresses[%d] is neither an email nor a mapping", file, i)
		}
	}
	cfg["addresses"] = append(list, subjectAddress)
	setup.addresses = append(setup.addresses, subjectAddress)

	// The example's acknowledgements name its demo addresses; the test
	// starts with none, in a file of the same relative name next to out
	// (relative paths are relative to the config file).
	ack := stringAt(t, file, cfg, "acknowledgements_file")
	if filepath.IsAbs(ack) {
		t.Fatalf("%s: acknowledgements_file %q should be relative to the file", file, ack)
	}
	setup.ackFile = filepath.Join(filepath.Dir(out), ack)
	if err := os.WriteFile(setup.ackFile, []byte("acknowledgements: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// /me every 5s: plan and API-up changes show within seconds; the
	// addresses still fit in a 15s round at 55 requests a minute.
	refresh := mapAt(t, file, cfg, "refresh")
	refresh["interval"] = "15s"
	refresh["me_interval"] = "5s"
	writeYAML(t, out, cfg)
	return setup
}

// prometheusConfig derives Prometheus's configuration: 1s scrape and rule
// evaluation, the exporter at exporterAddrs (one target per replica) for
// the job the rules select, Alertmanager at amAddr and absolute rule paths.
// It returns the rule files of the example; the written file loads
// ruleCopy in their place.
func prometheusConfig(t *testing.T, examples, out string, exporterAddrs []string, amAddr, ruleCopy string) []string {
	t.Helper()
	return prometheusConfigFrom(t, filepath.Join(examples, "prometheus.yml"), out, map[string][]string{jobName: exporterAddrs}, amAddr, ruleCopy)
}

// prometheusConfigFrom is prometheusConfig from an example file, with the
// targets of each scrape config named in targets (by job_name), every one
// of which the file must have.
func prometheusConfigFrom(t *testing.T, file, out string, targets map[string][]string, amAddr, ruleCopy string) []string {
	t.Helper()
	examples := filepath.Dir(file)
	cfg := readYAML(t, file)
	global := mapAt(t, file, cfg, "global")
	global["scrape_interval"] = "1s"
	global["evaluation_interval"] = "1s"

	ruleFiles, ok := cfg["rule_files"].([]any)
	if !ok || len(ruleFiles) == 0 {
		t.Fatalf("%s: rule_files is not a non-empty list", file)
	}
	var rules []string
	for i, r := range ruleFiles {
		path, ok := r.(string)
		if !ok {
			t.Fatalf("%s: rule_files[%d] is not a string", file, i)
		}
		rules = append(rules, absolute(examples, path))
	}
	cfg["rule_files"] = []any{ruleCopy}

	alertmanagers := mapsAt(t, file, mapAt(t, file, cfg, "alerting"), "alertmanagers")
	if len(alertmanagers) != 1 {
		t.Fatalf("%s: want one alertmanagers entry, got %d", file, len(alertmanagers))
	}
	setTargets(t, file, alertmanagers[0], amAddr)

	found := map[string]bool{}
	for _, sc := range mapsAt(t, file, cfg, "scrape_configs") {
		name, _ := sc["job_name"].(string)
		if addrs, ok := targets[name]; ok {
			setTargets(t, file, sc, addrs...)
			found[name] = true
		}
	}
	for name := range targets {
		if !found[name] {
			t.Fatalf("%s: no scrape config %q (job %q is the one the rules and dashboards select)", file, name, jobName)
		}
	}
	writeYAML(t, out, cfg)
	return rules
}

// setTargets replaces the targets of a single static config with addrs.
func setTargets(t *testing.T, file string, m yamlMap, addrs ...string) {
	t.Helper()
	statics := mapsAt(t, file, m, "static_configs")
	if len(statics) != 1 {
		t.Fatalf("%s: want one static_configs entry, got %d", file, len(statics))
	}
	targets, ok := statics[0]["targets"].([]any)
	if !ok || len(targets) == 0 {
		t.Fatalf("%s: want targets in static_configs, got %v", file, statics[0]["targets"])
	}
	list := make([]any, len(addrs))
	for i, a := range addrs {
		list[i] = a
	}
	statics[0]["targets"] = list
}

// alertmanagerConfig derives Alertmanager's configuration: every webhook
// posts to receiverHost (same path), mail goes to smtpAddr (where nothing
// listens, so no local MTA ever sends the example's mail), and every route
// that sets group_wait or group_interval waits a second instead.
func alertmanagerConfig(t *testing.T, examples, out, receiverHost, smtpAddr string) {
	t.Helper()
	file := filepath.Join(examples, "alertmanager.yml")
	cfg := readYAML(t, file)
	global := mapAt(t, file, cfg, "global")
	if _, ok := global["smtp_smarthost"]; ok {
		global["smtp_smarthost"] = smtpAddr
	}
	route := mapAt(t, file, cfg, "route")
	route["group_wait"] = "1s"
	route["group_interval"] = "1s"
	shortenRoutes(t, file, route)
	webhooks := 0
	for _, receiver := range mapsAt(t, file, cfg, "receivers") {
		if _, ok := receiver["webhook_configs"]; !ok {
			continue
		}
		for _, hook := range mapsAt(t, file, receiver, "webhook_configs") {
			hook["url"] = withHost(t, file, stringAt(t, file, hook, "url"), receiverHost)
			webhooks++
		}
	}
	if webhooks == 0 {
		t.Fatalf("%s: no webhook receiver to point at the test", file)
	}
	writeYAML(t, out, cfg)
}

func shortenRoutes(t *testing.T, file string, route yamlMap) {
	t.Helper()
	if _, ok := route["routes"]; !ok {
		return
	}
	for _, child := range mapsAt(t, file, route, "routes") {
		for _, key := range []string{"group_wait", "group_interval"} {
			if _, ok := child[key]; ok {
				child[key] = "1s"
			}
		}
		shortenRoutes(t, file, child)
	}
}
