// SPDX-License-Identifier: Apache-2.0

package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// owner_labels defaults to team and owner; the config's labels of an
// address reach Watched in name order.
func TestOwnerLabelsDefault(t *testing.T) {
	c, err := parseFile(t, minimalYAML+"addresses:\n  - {email: a@example.com, labels: {team: payments, owner: jdoe}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.OwnerLabels, []string{"team", "owner"}) {
		t.Errorf("owner_labels = %v, want [team owner]", c.OwnerLabels)
	}
	want := []breach.Label{{Name: "owner", Value: "jdoe"}, {Name: "team", Value: "payments"}}
	if got := c.Watched()[0].Labels; !slices.Equal(got, want) {
		t.Errorf("Watched labels = %v, want %v", got, want)
	}
	if !c.Metrics.Info() {
		t.Error("metrics.address_info must default to on")
	}
}

// Every problem of the owner labels names its field and line, and never
// echoes a value (it may be an address).
func TestValidateOwnerLabels(t *testing.T) {
	long := strings.Repeat("x", breach.MaxOwnerLabelBytes+1)
	_, err := parseFile(t, minimalYAML+
		"owner_labels: [team, __meta, address, team, 9lives]\n"+
		"addresses:\n"+
		"  - email: a@example.com\n"+
		"    labels: {team: payments, building: b7}\n"+
		"  - {email: b@example.com, labels: {team: "+long+"}}\n"+
		"addresses_sd_files: ['x/*.json', 'x/*.json']\n"+
		"addresses_files: [{glob: 'y/*.txt', labels: {site: b7}}, {glob: 'z/*.txt', team: hr}]\n"+
		"metrics: {address_info: maybe}\n")
	for _, want := range []string{
		`owner_labels[1]: "__meta" is not a label name`,
		`owner_labels[2]: "address" is not a label name`,
		`owner_labels[3]: "team" duplicates owner_labels[0]`,
		`owner_labels[4]: "9lives" is not a label name`,
		`:6: addresses[0].labels: "building" is not one of owner_labels (team, __meta, address, team, 9lives)`,
		`:7: addresses[1].labels.team: 129 bytes, at most 128`,
		`addresses_sd_files[1]: "x/*.json" duplicates addresses_sd_files[0]`,
		`:10: metrics.address_info:`,
		`:9: addresses_files[0].labels: "site" is not one of owner_labels`,
		`:9: addresses_files[1]: unknown key "team"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nlacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), long) {
		t.Error("a label value is echoed")
	}
}

// --config.check reads addresses_sd_files as the exporter will: every
// skipped group, target or label with its file and line, no address shown
// outside email mode.
func TestLoadBundleChecksSDFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	sd := writeFile(t, dir, "owners.json", `[
  {"targets": ["a@example.com", "secret-not-an-address"], "labels": {"team": "payments", "floor": "3"}},
  "not a group"
]`)
	path := writeFile(t, dir, "config.yml", "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"+
		"labels: {address: hash}\naddresses_sd_files: ['*.json']\n")
	if _, err := LoadBundle(path, LoadOptions{}); err != nil {
		t.Fatalf("a start: %v, want no error from the address files", err)
	}
	_, err := LoadBundle(path, LoadOptions{AddressFiles: true})
	for _, want := range []string{
		sd + ":2: addresses_sd_files: not a valid email address",
		sd + `:2: addresses_sd_files: label "floor" is not one of owner_labels (team, owner)`,
		sd + ":3: addresses_sd_files: not a group",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nlacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "secret-not-an-address") {
		t.Error("in hash mode an invalid target must not be shown")
	}
}

// A label name that is an address is not shown outside email mode.
func TestOwnerLabelNameThatIsAnAddressIsNotShown(t *testing.T) {
	_, err := parseFile(t, minimalYAML+"labels: {address: hash}\naddresses:\n  - {email: a@example.com, labels: {x@example.com: y}}\n")
	if err == nil || !strings.Contains(err.Error(), "addresses[0].labels: is not one of owner_labels") || strings.Contains(err.Error(), "x@example.com") {
		t.Errorf("error %v: want the field, not the address", err)
	}
}
