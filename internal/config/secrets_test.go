// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// unsetEnv removes name for the duration of the test; t.Setenv first so
// the original value comes back afterwards.
func unsetEnv(t *testing.T, name string) {
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		file      string // content of token_file; "" means no token_file
		env       *string
		want      string
		wantError []string
	}{
		{name: "file with trailing newline", file: "svc_ak_abc123\n", want: "svc_ak_abc123"},
		{name: "file with surrounding whitespace", file: "  svc_ak_X-y.z~!\r\n\n", want: "svc_ak_X-y.z~!"},
		{name: "file wins over env", file: "svc_ak_fromfile", env: ptr("svc_ak_fromenv"), want: "svc_ak_fromfile"},
		{name: "env", env: ptr("svc_ak_fromenv"), want: "svc_ak_fromenv"},
		{name: "env trimmed", env: ptr("svc_ak_fromenv\n"), want: "svc_ak_fromenv"},
		{name: "neither", wantError: []string{"api.token_file", TokenEnv}},
		{name: "empty file", file: "\n", wantError: []string{"api.token_file", "empty"}},
		{name: "empty env", env: ptr(""), wantError: []string{TokenEnv, "empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c APIConfig
			if tc.file != "" {
				c.TokenFile = writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_"), tc.file)
			}
			if tc.env != nil {
				t.Setenv(TokenEnv, *tc.env)
			} else {
				unsetEnv(t, TokenEnv)
			}
			got, err := c.ReadToken()
			if tc.wantError != nil {
				checkError(t, "ReadToken()", err, tc.wantError)
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ReadToken() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestReadTokenBadFormNeverEchoesToken(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{
		"ghp_notOurs1234",        // wrong prefix
		"svc_ak_",                // empty token part
		"SVC_AK_shouting1234",    // prefix is case-sensitive
		"svc_ak_has space1234",   // space inside
		"svc_ak_tab\there1234",   // control character
		"svc_ak_caf\u00e9secret", // not ASCII
		"xsvc_ak_prefixed1234",
	} {
		for _, source := range []string{"file", "env"} {
			t.Run(source+"/"+bad, func(t *testing.T) {
				var c APIConfig
				wantSource := TokenEnv
				if source == "file" {
					c.TokenFile = writeFile(t, dir, "token", bad+"\n")
					wantSource = "api.token_file"
					unsetEnv(t, TokenEnv)
				} else {
					t.Setenv(TokenEnv, bad)
				}
				got, err := c.ReadToken()
				if err == nil {
					t.Fatalf("ReadToken() = %q, want an error", got)
				}
				msg := err.Error()
				if !strings.Contains(msg, "svc_ak_<token>") || !strings.Contains(msg, wantSource) {
					t.Errorf("error %q should name %s and the expected form svc_ak_<token>", msg, wantSource)
				}
				// The error names the prefix as the expected form; it must
				// not hold anything else of the value.
				secretPart := strings.TrimPrefix(strings.TrimPrefix(bad, "svc_ak_"), "SVC_AK_")
				if secretPart != "" && strings.Contains(msg, secretPart) {
					t.Errorf("error %q echoes the token", msg)
				}
			})
		}
	}
}

func TestReadTokenMissingFile(t *testing.T) {
	c := APIConfig{TokenFile: filepath.Join(t.TempDir(), "absent")}
	if _, err := c.ReadToken(); err == nil || !strings.Contains(err.Error(), "api.token_file") || !strings.Contains(err.Error(), c.TokenFile) {
		t.Errorf("ReadToken() error = %v, want one naming api.token_file and the path", err)
	}
}

func TestReadTokenPicksUpRotation(t *testing.T) {
	dir := t.TempDir()
	c := APIConfig{TokenFile: writeFile(t, dir, "token", "svc_ak_old\n")}
	if got, err := c.ReadToken(); err != nil || got != "svc_ak_old" {
		t.Fatalf("ReadToken() = %q, %v", got, err)
	}
	writeFile(t, dir, "token", "svc_ak_new\n")
	if got, err := c.ReadToken(); err != nil || got != "svc_ak_new" {
		t.Errorf("after rotation ReadToken() = %q, %v; want svc_ak_new", got, err)
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	current := writeFile(t, dir, "current", "s3cret-current-0001\n")
	next := writeFile(t, dir, "next", "  leading kept, trailing dropped \t\r\n\n")
	binary := writeFile(t, dir, "binary", "\x00\x01\xff"+strings.Repeat("\x80", 13))
	empty := writeFile(t, dir, "empty", " \n")
	short := writeFile(t, dir, "short", "s3cre\n")
	fifteen := writeFile(t, dir, "fifteen", "s3cret-15-bytes\n")
	absent := filepath.Join(dir, "absent")

	for _, tc := range []struct {
		name      string
		files     []string
		env       *string
		want      [][]byte
		wantError []string
	}{
		{name: "several files in order", files: []string{current, next, binary},
			want: [][]byte{[]byte("s3cret-current-0001"), []byte("  leading kept, trailing dropped"), []byte("\x00\x01\xff" + strings.Repeat("\x80", 13))}},
		{name: "files win over env", files: []string{current}, env: ptr("from-env-0123456789"), want: [][]byte{[]byte("s3cret-current-0001")}},
		{name: "env fallback", env: ptr("from-env-0123456789\n"), want: [][]byte{[]byte("from-env-0123456789")}},
		// An HMAC key of 5 bytes can be guessed from signed bodies.
		{name: "5-byte file", files: []string{current, short}, wantError: []string{"webhook.secret_files[1]", short, "5 bytes, want at least 16"}},
		{name: "15-byte file", files: []string{fifteen}, wantError: []string{"webhook.secret_files[0]", fifteen, "15 bytes"}},
		{name: "short env", env: ptr("s3cret\n"), wantError: []string{WebhookSecretEnv, "6 bytes, want at least 16"}},
		{name: "none configured", want: nil},
		{name: "empty file", files: []string{current, empty}, wantError: []string{"webhook.secret_files[1]", empty, "empty"}},
		{name: "missing file", files: []string{absent}, wantError: []string{"webhook.secret_files[0]", absent}},
		{name: "empty env", env: ptr("\n"), wantError: []string{WebhookSecretEnv, "empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(WebhookSecretEnv, *tc.env)
			} else {
				unsetEnv(t, WebhookSecretEnv)
			}
			c := WebhookConfig{SecretFiles: tc.files}
			got, err := c.ReadSecrets()
			if tc.wantError != nil {
				checkError(t, "ReadSecrets()", err, tc.wantError)
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q echoes a secret", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ReadSecrets() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestReadLabelKey(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good", "s3cret-label-key-0123\n")
	short := writeFile(t, dir, "short", "s3cret-label\n")
	if key, err := (&LabelsConfig{AddressKeyFile: good}).ReadLabelKey(); err != nil || string(key) != "s3cret-label-key-0123" {
		t.Errorf("ReadLabelKey() = %q, %v", key, err)
	}
	if key, err := (&LabelsConfig{}).ReadLabelKey(); err != nil || key != nil {
		t.Errorf("no key file: ReadLabelKey() = %q, %v; want nothing", key, err)
	}
	for file, wants := range map[string][]string{
		short:                         {"labels.address_key_file", short, "12 bytes, want at least 16"},
		filepath.Join(dir, "missing"): {"labels.address_key_file", "missing"},
	} {
		_, err := (&LabelsConfig{AddressKeyFile: file}).ReadLabelKey()
		if err == nil {
			t.Errorf("%s: accepted", file)
			continue
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q echoes the key", err)
		}
	}
}

// checkError fails unless err is an error naming every part of want.
func checkError(t *testing.T, call string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want an error", call)
	}
	for _, part := range want {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not contain %q", err, part)
		}
	}
}
