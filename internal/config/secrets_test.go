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
				if err == nil {
					t.Fatalf("ReadToken() succeeded, want an error")
				}
				for _, want := range tc.wantError {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
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
	current := writeFile(t, dir, "current", "s3cret-current\n")
	next := writeFile(t, dir, "next", "  leading kept, trailing dropped \t\r\n\n")
	binary := writeFile(t, dir, "binary", "\x00\x01\xff")
	empty := writeFile(t, dir, "empty", " \n")
	absent := filepath.Join(dir, "absent")

	for _, tc := range []struct {
		name      string
		files     []string
		env       *string
		want      [][]byte
		wantError []string
	}{
		{name: "several files in order", files: []string{current, next, binary},
			want: [][]byte{[]byte("s3cret-current"), []byte("  leading kept, trailing dropped"), []byte("\x00\x01\xff")}},
		{name: "files win over env", files: []string{current}, env: ptr("from-env"), want: [][]byte{[]byte("s3cret-current")}},
		{name: "env fallback", env: ptr("from-env\n"), want: [][]byte{[]byte("from-env")}},
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
				if err == nil {
					t.Fatalf("ReadSecrets() succeeded, want an error")
				}
				for _, want := range tc.wantError {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
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
