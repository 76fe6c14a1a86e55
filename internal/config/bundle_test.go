// SPDX-License-Identifier: Apache-2.0

package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// hmac labels come from the key file, which every load reads again: a
// reload with a new key relabels every address.
func TestLoadBundleLabelKey(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	writeFile(t, dir, "key", "first-label-key-0123456789\n")
	path := writeFile(t, dir, "config.yml", "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"+
		"labels: {address: hmac, address_key_file: key}\naddresses: [Alice@Example.com]\n")
	alice := breach.Address{Email: "Alice@Example.com"}

	first, err := LoadBundle(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	label := first.Labels.Label(alice)
	if want := breach.HMACLabel([]byte("first-label-key-0123456789"), "alice@example.com"); label != want {
		t.Fatalf("label %q, want %q", label, want)
	}
	if !strings.HasPrefix(label, "hmac:") || len(label) != len("hmac:")+32 || label == breach.HashLabel(alice.Email) {
		t.Fatalf("label %q is not 128 bits of HMAC", label)
	}

	writeFile(t, dir, "key", "second-label-key-0123456789\n")
	second, err := LoadBundle(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if second.Labels.Label(alice) == label {
		t.Fatal("a reload with a new key kept the old labels")
	}

	writeFile(t, dir, "key", "short\n")
	if _, err := LoadBundle(path, LoadOptions{}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "key")) {
		t.Fatalf("a 5-byte key: %v, want an error naming the file", err)
	}
}

// collide labels every address alike, as two equal hashes would.
type collide struct{}

func (collide) Label(breach.Address) string { return "same" }

func TestCheckLabelsUnique(t *testing.T) {
	c := &Config{Addresses: []Address{{Email: "a@x.org"}, {Email: "b@x.org"}, {Email: "c@x.org"}}}
	if err := checkLabelsUnique(c, breach.LabelHash); err != nil {
		t.Fatalf("distinct hashes: %v", err)
	}
	err := checkLabelsUnique(c, collide{})
	if err == nil || !strings.Contains(err.Error(), "addresses[0] and addresses[1]") {
		t.Fatalf("colliding labels: %v, want an error naming both entries", err)
	}
	// Across accounts, each named by its path.
	c = &Config{Accounts: []Account{
		{Name: "corp", Addresses: []Address{{Email: "a@x.org"}}},
		{Name: "labs", Addresses: []Address{{Email: "b@x.org"}}},
	}}
	err = checkLabelsUnique(c, collide{})
	if err == nil || !strings.Contains(err.Error(), "accounts[0].addresses[0] and accounts[1].addresses[0]") {
		t.Fatalf("colliding labels across accounts: %v, want an error naming both entries", err)
	}
}

// A listed secret file that is missing only matters when the receiver is
// on: off, it is a warning and the start goes on.
func TestLoadBundleSecretsOnlyRequiredWithTheReceiver(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_demo\n")
	path := writeFile(t, dir, "breach_exporter.yml", minimalYAML+
		"  token_file: token\nwebhook:\n  secret_files: [absent]\n")

	b, err := LoadBundle(path, LoadOptions{Webhook: false})
	if err != nil {
		t.Fatalf("receiver off: LoadBundle: %v", err)
	}
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], path+":5: webhook.secret_files[0]") {
		t.Errorf("receiver off: warnings = %q, want one naming %s:5 and webhook.secret_files[0]", b.Warnings, path)
	}
	if b.Accounts[0].Secrets != nil {
		t.Errorf("receiver off: secrets = %q, want none", b.Accounts[0].Secrets)
	}

	_, err = LoadBundle(path, LoadOptions{Webhook: true})
	if err == nil || !strings.Contains(err.Error(), path+":5: webhook.secret_files[0]") {
		t.Errorf("receiver on: LoadBundle error = %v, want one naming %s:5 and webhook.secret_files[0]", err, path)
	}
}

// The token, the secrets and the file's own problems come together.
func TestLoadBundleReportsFileTokenAndSecretsTogether(t *testing.T) {
	dir := t.TempDir()
	unsetEnv(t, TokenEnv)
	path := writeFile(t, dir, "breach_exporter.yml", minimalYAML+
		"  requests_per_minute: 0\n  token_file: absent-token\nwebhook:\n  secret_files: [absent-1, absent-2]\n")
	_, err := LoadBundle(path, LoadOptions{Webhook: true})
	if err == nil {
		t.Fatal("LoadBundle succeeded")
	}
	for _, want := range []string{
		path + ":3: api.requests_per_minute",
		path + ":4: api.token_file",
		path + ":6: webhook.secret_files[0]",
		path + ":6: webhook.secret_files[1]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
