// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestStoreAbsentByDefault(t *testing.T) {
	// A store: with its keys commented out is no store either.
	for _, yml := range []string{minimalYAML, minimalYAML + "store:\n"} {
		if c := mustParse(t, yml); c.Store != nil {
			t.Errorf("%q: store = %+v, want none", yml, c.Store)
		}
	}
}

func TestStoreParse(t *testing.T) {
	c := mustParse(t, minimalYAML+"store:\n  url: rediss://valkey.example.com:6380/2\n  password_file: /secrets/redis\n")
	want := StoreConfig{URL: "rediss://valkey.example.com:6380/2", PasswordFile: "/secrets/redis", KeyPrefix: DefaultKeyPrefix}
	if c.Store == nil || !reflect.DeepEqual(*c.Store, want) {
		t.Fatalf("store = %+v, want %+v", c.Store, want)
	}
	c = mustParse(t, minimalYAML+"store: {url: 'redis://127.0.0.1', key_prefix: 'team-a:breach'}\n")
	if c.Store.KeyPrefix != "team-a:breach" {
		t.Errorf("key_prefix = %q, want it as written", c.Store.KeyPrefix)
	}
}

func TestStoreValidationErrors(t *testing.T) {
	const store = minimalYAML + "store:\n"
	for _, tc := range []struct {
		name  string
		yml   string
		wants []string
	}{
		{"url missing", store + "  key_prefix: x\n", []string{"config.yml:3: store.url", "required"}},
		{"url not redis", store + "  url: http://127.0.0.1:6379\n", []string{"config.yml:4: store.url", `"http://127.0.0.1:6379"`, "redis://"}},
		{"url without scheme", store + "  url: 127.0.0.1:6379\n", []string{"store.url"}},
		{"url no host", store + "  url: 'redis:///0'\n", []string{"store.url", "no host"}},
		{"url db not a number", store + "  url: redis://r:6379/zero\n", []string{"store.url", "database number"}},
		{"url db with a path", store + "  url: redis://r:6379/0/1\n", []string{"store.url", "database number"}},
		{"url unparsable", store + "  url: 'redis://[::1'\n", []string{"store.url", "not a valid URL"}},
		{"unknown key", store + "  url: redis://r\n  passwd_file: x\n", []string{"config.yml:5: store:", `unknown key "passwd_file"`}},
		{"key_prefix empty", store + "  url: redis://r\n  key_prefix: ''\n", []string{"config.yml:5: store.key_prefix", "empty"}},
		{"key_prefix too long", store + "  url: redis://r\n  key_prefix: " + strings.Repeat("p", 65) + "\n", []string{"store.key_prefix", "65 bytes, at most 64"}},
		{"key_prefix space", store + "  url: redis://r\n  key_prefix: 'a b'\n", []string{"store.key_prefix", `"a b"`, "whitespace or braces"}},
		{"key_prefix braces", store + "  url: redis://r\n  key_prefix: '{a}'\n", []string{"store.key_prefix", "braces"}},
		{"deployment too long", store + "  url: redis://r\n  deployment: " + strings.Repeat("d", 65) + "\n", []string{"store.deployment", "65 bytes, at most 64"}},
		{"deployment space", store + "  url: redis://r\n  deployment: 'a b'\n", []string{"store.deployment", `"a b"`, "letters, digits"}},
		{"not a mapping", minimalYAML + "store: redis://r\n", []string{"store", "mapping"}},
		{"url and servers", store + "  url: redis://r\n  servers: [r:6379]\n", []string{"store.servers", "exclude each other"}},
		{"server without port", store + "  servers: [r:6379, r]\n", []string{"store.servers[1]", `"r"`, "host:port"}},
		{"server port zero", store + "  servers: ['r:0']\n", []string{"store.servers[0]", "host:port"}},
		{"server twice", store + "  servers: [r:6379, r:6379]\n", []string{"store.servers[1]", "twice"}},
		{"too many servers", store + "  servers: [" + strings.Repeat("r:1, ", 32) + "r:2]\n", []string{"store.servers", "33 addresses, at most 32"}},
		{"master_name without servers", store + "  url: redis://r\n  master_name: m\n", []string{"store.master_name", "store.servers"}},
		{"master_name space", store + "  servers: [r:26379]\n  master_name: 'a b'\n", []string{"store.master_name", "whitespace"}},
		{"sentinel password without master", store + "  servers: [r:6379]\n  sentinel_password_file: p\n", []string{"store.sentinel_password_file", "master_name"}},
		{"username twice", store + "  url: redis://u@r\n  username: v\n", []string{"store.username", "exclude each other"}},
		{"username too long", store + "  url: redis://r\n  username: " + strings.Repeat("u", 129) + "\n", []string{"store.username", "129 bytes, at most 128"}},
		{"tls without rediss", store + "  url: redis://r\n  tls: {}\n", []string{"store.tls", "rediss://"}},
		{"tls cert without key", store + "  servers: [r:6379]\n  tls: {cert_file: c}\n", []string{"store.tls", "cert_file and key_file"}},
		{"tls unknown key", store + "  servers: [r:6379]\n  tls: {ca: x}\n", []string{`unknown key "ca"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { assertParseFails(t, tc.yml, tc.wants...) })
	}
}

// A store URL's password may be in the config file (it works), but no
// problem shows it.
func TestStoreURLPasswordNeverShown(t *testing.T) {
	_, err := parseFile(t, minimalYAML+"store: {url: 'ftp://u:hunter2@r:6379'}\n")
	if err == nil || !strings.Contains(err.Error(), "store.url") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v must name store.url and hide the password", err)
	}
	_, err = parseFile(t, minimalYAML+"store: {url: 'redis://u:hunter2@[::1'}\n")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v must hide the password", err)
	}
}

func TestLoadBundleStore(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	const base = "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"

	t.Run("password file, relative to the config", func(t *testing.T) {
		writeFile(t, dir, "redis-password", "s3cret-store-password\n")
		path := writeFile(t, dir, "config.yml", base+"store:\n  url: redis://127.0.0.1:6379/0\n  password_file: redis-password\n")
		b, err := LoadBundle(path, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.StorePassword != "s3cret-store-password" || len(b.Warnings) != 0 {
			t.Errorf("password %q, warnings %q; want the file's content and none", b.StorePassword, b.Warnings)
		}
		if want := filepath.Join(dir, "redis-password"); b.Config.Store.PasswordFile != want {
			t.Errorf("store.password_file = %q, want %q", b.Config.Store.PasswordFile, want)
		}
	})
	t.Run("password file missing", func(t *testing.T) {
		path := writeFile(t, dir, "config.yml", base+"store:\n  url: redis://127.0.0.1:6379/0\n  password_file: absent\n")
		_, err := LoadBundle(path, LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), path+":4: store.password_file") {
			t.Errorf("LoadBundle error = %v, want one naming %s:4 and store.password_file", err, path)
		}
	})
	t.Run("password file empty", func(t *testing.T) {
		writeFile(t, dir, "empty", "\n")
		path := writeFile(t, dir, "config.yml", base+"store:\n  url: redis://127.0.0.1:6379/0\n  password_file: empty\n")
		if _, err := LoadBundle(path, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "store.password_file") {
			t.Errorf("LoadBundle error = %v, want one naming store.password_file", err)
		}
	})
	t.Run("password in the URL is a warning", func(t *testing.T) {
		path := writeFile(t, dir, "config.yml", base+"store:\n  url: redis://:hunter2@127.0.0.1:6379\n")
		b, err := LoadBundle(path, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], path+":3: store.url") ||
			!strings.Contains(b.Warnings[0], "store.password_file") || strings.Contains(b.Warnings[0], "hunter2") {
			t.Errorf("warnings = %q, want one naming %s:3 and store.password_file, without the password", b.Warnings, path)
		}
	})
	t.Run("no store", func(t *testing.T) {
		path := writeFile(t, dir, "config.yml", base)
		b, err := LoadBundle(path, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Config.Store != nil || b.StorePassword != "" {
			t.Errorf("store %+v, password %q; want neither", b.Config.Store, b.StorePassword)
		}
	})
}

// A value from the file is echoed in an error at most maxEchoBytes long:
// a 5,000-byte key_prefix made a 5,000-byte error (and log line, and
// /-/reload answer).
func TestErrorsEchoBoundedValues(t *testing.T) {
	long := strings.Repeat("p", 5000)
	for field, yml := range map[string]string{
		"store.key_prefix: \"ppp":  minimalYAML + "store:\n  url: redis://r\n  key_prefix: '" + long + " x'\n",
		"5000 bytes, at most 64":   minimalYAML + "store:\n  url: redis://r\n  key_prefix: " + long + "\n",
		"labels.address: \"ppp":    minimalYAML + "labels:\n  address: " + long + "\n",
		"store.url: \"redis://r/p": minimalYAML + "store:\n  url: redis://r/" + long + "\n",
		"unknown key \"ppp":        minimalYAML + long[:1000] + ": 1\n",
	} {
		_, err := parseFile(t, yml)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "…") {
			t.Errorf("%s: error %.200q, want it to name the field, the value cut", field, err)
			continue
		}
		if n := len(err.Error()); n > 400 {
			t.Errorf("%s: the error has %d bytes, want at most 400:\n%.600s", field, n, err)
		}
	}
}

// store.signing_key_file: one or two keys; the first signs with the key
// derived from the API keys, and both verify. The derived key follows the
// API key, and --config.check's errors name the field, never a key.
func TestStoreSigningKeys(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	const base = "api: {base_url: 'https://x.org/api/v1', token_file: token}\nstore:\n  url: redis://127.0.0.1:6379/0\n"
	load := func(t *testing.T, extra string) (*Bundle, error) {
		t.Helper()
		return LoadBundle(writeFile(t, dir, "config.yml", base+extra), LoadOptions{})
	}
	plain, err := load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	sign, verify := plain.StoreKeys()
	if len(sign) != 1 || len(verify) != 1 || !bytes.Equal(sign[0], verify[0]) {
		t.Fatalf("without a file: sign %d keys, verify %d; want the derived key alone", len(sign), len(verify))
	}
	derived := sign[0]

	writeFile(t, dir, "signing", "first-signing-key-0123\n\nsecond-signing-key-0123\n")
	b, err := load(t, "  signing_key_file: signing\n")
	if err != nil {
		t.Fatal(err)
	}
	sign, verify = b.StoreKeys()
	if len(sign) != 2 || string(sign[0]) != "first-signing-key-0123" || !bytes.Equal(sign[1], derived) {
		t.Errorf("sign = %q, want the file's first key and the derived one", sign)
	}
	if len(verify) != 3 || string(verify[1]) != "second-signing-key-0123" || !bytes.Equal(verify[2], derived) {
		t.Errorf("verify = %q, want both of the file's keys and the derived one", verify)
	}

	writeFile(t, dir, "token", "svc_ak_rotated\n")
	rotated, err := load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := rotated.StoreKeys(); bytes.Equal(s[0], derived) {
		t.Error("the derived key did not change with the API key")
	}

	for content, want := range map[string]string{
		"\n\n":    "is empty",
		"short\n": "at least 16",
		"a-long-enough-key-1\nb-long-enough-key-2\nc-long-enough-key-3\n": "at most 2",
	} {
		writeFile(t, dir, "signing", content)
		_, err := load(t, "  signing_key_file: signing\n")
		if err == nil || !strings.Contains(err.Error(), "store.signing_key_file") || !strings.Contains(err.Error(), want) ||
			strings.Contains(err.Error(), "enough-key") || strings.Contains(err.Error(), "short") {
			t.Errorf("%q: error %v, want one naming store.signing_key_file and %q, without a key", content, err, want)
		}
	}
	if _, err := load(t, "  signing_key_file: absent\n"); err == nil || !strings.Contains(err.Error(), "store.signing_key_file") {
		t.Errorf("a missing file: %v", err)
	}
	if b, err := load(t, "  accept_unsigned: true\n"); err != nil || !b.Config.Store.AcceptUnsigned {
		t.Errorf("store.accept_unsigned: %v", err)
	}
}
