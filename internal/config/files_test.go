// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// loadWithin is LoadBundle that fails the test when it does not return
// promptly: a named pipe must never block it.
func loadWithin(t *testing.T, path string, o LoadOptions) (*Bundle, error) {
	t.Helper()
	type result struct {
		b   *Bundle
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := LoadBundle(path, o)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("LoadBundle(%s) blocked", path)
		return nil, nil
	}
}

func mkfifo(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every file a load reads is refused, promptly and naming where it is set,
// when it is a named pipe, whichever file it is.
func TestLoadBundleRefusesNamedPipes(t *testing.T) {
	for _, tc := range []struct {
		pipe string // which file is the pipe
		want string
	}{
		{"config.yml", "stat "},
		{"token", "api.token_file: stat "},
		{"key", "labels.address_key_file: stat "},
		{"secret", "webhook.secret_files[0]: stat "},
		{"acks.yml", "acknowledgements_file: stat "},
		{"ca.pem", "api.tls_config: stat "},
		{"web.yml", "--web.config.file: stat "},
	} {
		t.Run(tc.pipe, func(t *testing.T) {
			dir := t.TempDir()
			// A CA file only where it is the pipe: an empty one is no CA.
			tlsConfig := ""
			if tc.pipe == "ca.pem" {
				tlsConfig = ", tls_config: {ca_file: ca.pem}"
			}
			files := map[string]string{
				"token":    "svc_ak_test\n",
				"key":      "a-label-key-of-enough-bytes\n",
				"secret":   "a-webhook-secret-of-enough-bytes\n",
				"acks.yml": "acknowledgements: []\n",
				"web.yml":  "{}\n",
				"config.yml": "api: {base_url: 'https://x.org/api/v1', token_file: token" + tlsConfig + "}\n" +
					"labels: {address: hmac, address_key_file: key}\nwebhook: {secret_files: [secret]}\n" +
					"acknowledgements_file: acks.yml\naddresses: [alice@example.com]\n",
			}
			for name, content := range files {
				if name != tc.pipe {
					writeFile(t, dir, name, content)
				}
			}
			mkfifo(t, dir, tc.pipe)
			_, err := loadWithin(t, filepath.Join(dir, "config.yml"), LoadOptions{
				Webhook:    true,
				WebConfigs: []WebConfig{{Flag: "--web.config.file", File: filepath.Join(dir, "web.yml")}},
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Join(dir, tc.pipe)+": not a regular file (a named pipe)") {
				t.Errorf("got %v, want an error naming %q and the pipe", err, tc.want)
			}
		})
	}
}

// The files a web config names are checked too, and a valid web config
// passes the toolkit's own check.
func TestLoadBundleChecksWebConfigs(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TokenEnv, "svc_ak_test")
	path := writeFile(t, dir, "config.yml", minimalYAML)
	good := writeFile(t, dir, "good.yml", "basic_auth_users:\n  prometheus: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n")
	mkfifo(t, dir, "cert.pem")
	writeFile(t, dir, "key.pem", "")
	pipeCert := writeFile(t, dir, "tls.yml", "tls_server_config: {cert_file: cert.pem, key_file: key.pem}\n")
	bad := writeFile(t, dir, "bad.yml", "basic_auth_users: [\n")

	if _, err := loadWithin(t, path, LoadOptions{WebConfigs: []WebConfig{{"--web.config.file", good}, {"--webhook.web-config.file", ""}}}); err != nil {
		t.Fatalf("a valid web config: %v", err)
	}
	_, err := loadWithin(t, path, LoadOptions{WebConfigs: []WebConfig{{"--webhook.web-config.file", pipeCert}}})
	if err == nil || !strings.Contains(err.Error(), "--webhook.web-config.file: stat "+filepath.Join(dir, "cert.pem")+": not a regular file") {
		t.Errorf("a web config naming a pipe: %v", err)
	}
	_, err = loadWithin(t, path, LoadOptions{WebConfigs: []WebConfig{{"--web.config.file", bad}}})
	if err == nil || !strings.Contains(err.Error(), "--web.config.file: "+bad) {
		t.Errorf("a web config that is not YAML: %v", err)
	}
}

// labels.address hmac without address_key_file is a problem naming the
// field, never a panic (it once killed a running exporter on reload).
func TestLoadBundleHMACWithoutKey(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TokenEnv, "svc_ak_test")
	path := writeFile(t, dir, "config.yml", minimalYAML+"labels: {address: hmac}\naddresses: [alice@example.com, bob@example.com]\n")
	_, err := loadWithin(t, path, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), path+":3: labels.address_key_file: is required when labels.address is hmac") {
		t.Errorf("got %v, want the problem at labels", err)
	}
}

// A file with a problem a line reports MaxProblems of them and the count
// of the rest.
func TestLoadBundleCapsProblems(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TokenEnv, "svc_ak_test")
	var b strings.Builder
	b.WriteString(minimalYAML + "labels: {address: hmac, address_key_file: key}\naddresses:\n")
	const n = 500
	for i := range n {
		fmt.Fprintf(&b, "  - not-an-address-%d\n", i)
	}
	writeFile(t, dir, "key", "a-label-key-of-enough-bytes\n")
	path := writeFile(t, dir, "config.yml", b.String())
	_, err := loadWithin(t, path, LoadOptions{})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != MaxProblems+1 {
		t.Fatalf("got %d problems, want %d: %v", len(ps), MaxProblems+1, err)
	}
	if want := fmt.Sprintf("%s: and %d more problems not shown", path, n-MaxProblems); ps[MaxProblems].Error() != want {
		t.Errorf("last problem %q, want %q", ps[MaxProblems], want)
	}
}

// In hmac mode no error of the load shows an address, from the config or
// from the acknowledgements: the label mode's privacy holds in errors too.
func TestLoadBundleErrorsHideAddresses(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TokenEnv, "svc_ak_test")
	writeFile(t, dir, "key", "a-label-key-of-enough-bytes\n")
	writeFile(t, dir, "acks.yml", "acknowledgements:\n  - address: alice.secret@@example.com\n    handled_at: 2026-01-01T00:00:00Z\n    by: ops\n")
	path := writeFile(t, dir, "config.yml", minimalYAML+"labels: {address: hmac, address_key_file: key}\n"+
		"acknowledgements_file: acks.yml\naddresses: [bob.secret@@example.com]\n")
	_, err := loadWithin(t, path, LoadOptions{})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("got %v, want errors without the addresses", err)
	}
	for _, want := range []string{path + ":5: addresses[0]: is not a valid email address", filepath.Join(dir, "acks.yml") + ": line 2: acknowledgement: address (a value with @, not shown)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\ndoes not name %q", err, want)
		}
	}
}

// An acknowledgements file over its limit fails the load with an error
// naming the file and the limit, before a byte of it is parsed.
func TestLoadBundleRefusesHugeAcknowledgements(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TokenEnv, "svc_ak_test")
	acks := filepath.Join(dir, "acks.yml")
	f, err := os.Create(acks)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: the size is what counts.
	if err := f.Truncate(fileread.MaxAcknowledgementsBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := writeFile(t, dir, "config.yml", minimalYAML+"acknowledgements_file: acks.yml\n")
	_, err = loadWithin(t, path, LoadOptions{})
	if want := fmt.Sprintf("acknowledgements_file: stat %s: larger than the limit of %d bytes", acks, fileread.MaxAcknowledgementsBytes); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}
