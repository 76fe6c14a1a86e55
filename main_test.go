// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

type fakeReloader struct{ err error }

func (f fakeReloader) Reload(context.Context) error { return f.err }

func TestReloadHandler(t *testing.T) {
	for _, tc := range []struct {
		method string
		err    error
		code   int
		body   string
	}{
		{http.MethodGet, nil, http.StatusMethodNotAllowed, "Use POST"},
		{http.MethodPut, nil, http.StatusMethodNotAllowed, "Use POST"},
		{http.MethodDelete, nil, http.StatusMethodNotAllowed, "Use POST"},
		{http.MethodPost, nil, http.StatusOK, "Reloaded"},
		{http.MethodPost, errors.New(`addresses[1]: "bob@" is not a valid email address`), http.StatusInternalServerError, `"bob@" is not a valid email address`},
	} {
		rec := httptest.NewRecorder()
		reloadHandler(fakeReloader{tc.err}).ServeHTTP(rec, httptest.NewRequest(tc.method, "/-/reload", nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s with err %v: got %d %q, want %d containing %q", tc.method, tc.err, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if allow := rec.Header().Get("Allow"); tc.code == http.StatusMethodNotAllowed && allow != http.MethodPost {
			t.Errorf("%s: Allow %q, want POST", tc.method, allow)
		}
	}
}

// --config.check and a refused start say what is wrong, naming the field and
// never echoing the token.
func TestConfigProblems(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "good_token"), "svc_ak_test\n")
	testkit.WriteFile(t, filepath.Join(dir, "bad_token"), "sk_live_oops\n")
	cfg := func(name, body string) string {
		path := filepath.Join(dir, name)
		testkit.WriteFile(t, path, body)
		return path
	}
	good := cfg("good.yml", "api: {base_url: http://127.0.0.1:1/api/v1, token_file: good_token}\naddresses: [a@example.com]\n")
	budget := cfg("budget.yml", "api: {base_url: http://127.0.0.1:1/api/v1, token_file: good_token, requests_per_minute: 61}\n")
	token := cfg("token.yml", "api: {base_url: http://127.0.0.1:1/api/v1, token_file: bad_token}\n")
	noSecret := good

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"valid", []string{"--config.check", "--config.file", good}, 0, "is valid"},
		{"budget out of range", []string{"--config.check", "--config.file", budget}, 1, "api.requests_per_minute"},
		{"token of the wrong form", []string{"--config.check", "--config.file", token}, 1, "svc_ak_"},
		{"webhook without a secret", []string{"--config.check", "--config.file", noSecret, "--webhook.listen-address", "127.0.0.1:0"}, 1, "secret"},
		{"refused start", []string{"--config.file", token, "--web.listen-address", "127.0.0.1:0", "--storage.path", ""}, 1, "svc_ak_"},
		{"storage path not a folder", []string{"--config.file", good, "--web.listen-address", "127.0.0.1:0", "--storage.path", good}, 1, "--storage.path"},
		{"snapshot interval zero", []string{"--config.file", good, "--storage.snapshot-interval", "0s"}, 2, "--storage.snapshot-interval"},
		{"missing file", []string{"--config.check", "--config.file", filepath.Join(dir, "nope.yml")}, 1, "nope.yml"},
		{"bad webhook path", []string{"--config.file", good, "--webhook.listen-address", "127.0.0.1:0", "--webhook.path", "/-/healthy"}, 2, "--webhook.path"},
		{"acknowledgements without a state folder", []string{"--config.file", good, "--web.enable-acknowledgements", "--storage.path", ""}, 2, "--storage.path"},
		{"user header without a proxy", []string{"--config.file", good, "--web.acknowledgements.user-header", "X-Forwarded-User"}, 2, "--web.acknowledgements.proxy"},
		{"proxy that is no address", []string{"--config.file", good, "--web.acknowledgements.user-header", "X-User", "--web.acknowledgements.proxy", "proxy.example"}, 2, "--web.acknowledgements.proxy"},
		{"relative external URL", []string{"--config.file", good, "--web.external-url", "breach.example.com"}, 2, "--web.external-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(notStopped(), tc.args, &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out.String(), tc.code, tc.want)
			}
			if strings.Contains(out.String(), "sk_live_oops") {
				t.Error("the output echoes the token")
			}
		})
	}
}

// The landing page links only what this listener serves: exporter-toolkit
// adds pprof links by default, and with no pprof handler they answer 404.
func TestLandingPageHasNoProfilingLinks(t *testing.T) {
	mux, err := newMux(fakeReloader{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "/metrics", &readiness{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	code, page := testkit.Get(t, srv.URL+"/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, page)
	}
	// The toolkit's stylesheet styles a #pprof block whether or not it is
	// shown; look at the markup alone.
	markup := regexp.MustCompile(`(?s)<style>.*</style>`).ReplaceAllString(page, "")
	for _, bad := range []string{"pprof", "debug/", "profile"} {
		if strings.Contains(markup, bad) {
			t.Errorf("landing page mentions %q:\n%s", bad, markup)
		}
	}
	links := regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(markup, -1)
	if len(links) == 0 {
		t.Fatalf("landing page has no links:\n%s", markup)
	}
	for _, l := range links {
		if !strings.HasPrefix(l[1], "/") {
			t.Errorf("landing page links off the listener: %s", l[1])
			continue
		}
		if code, _ := testkit.Get(t, srv.URL+l[1]); code != http.StatusOK {
			t.Errorf("landing page link %s answers %d", l[1], code)
		}
	}
}

// --config.check and a start end at once with an error naming the field
// or file on a named pipe, a web config naming one, or hmac labels without
// their key: a file that can block or a mode that cannot work must never
// hang or crash the check or the start.
func TestConfigCheckOddFiles(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), "svc_ak_test\n")
	pipe := filepath.Join(dir, "pipe.yml")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yml")
	testkit.WriteFile(t, good, "api: {base_url: http://127.0.0.1:1/api/v1, token_file: token}\n")
	hmac := filepath.Join(dir, "hmac.yml")
	testkit.WriteFile(t, hmac, "api: {base_url: http://127.0.0.1:1/api/v1, token_file: token}\nlabels: {address: hmac}\naddresses: [a@example.com, b@example.com]\n")
	const keyProblem = "labels.address_key_file: is required when labels.address is hmac"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"config", []string{"--config.check", "--config.file", pipe}, pipe + ": not a regular file (a named pipe)"},
		{"web config", []string{"--config.check", "--config.file", good, "--web.config.file", pipe}, "--web.config.file: stat " + pipe + ": not a regular file"},
		{"webhook web config", []string{"--config.check", "--config.file", good, "--webhook.listen-address", "127.0.0.1:0", "--webhook.web-config.file", pipe}, "--webhook.web-config.file: stat " + pipe},
		{"hmac without a key", []string{"--config.check", "--config.file", hmac}, keyProblem},
		{"start with hmac without a key", []string{"--config.file", hmac, "--web.listen-address", "127.0.0.1:0", "--storage.path", ""}, keyProblem},
		{"start with a named pipe", []string{"--config.file", pipe, "--web.listen-address", "127.0.0.1:0", "--storage.path", ""}, "not a regular file (a named pipe)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testkit.SyncBuffer
			done := make(chan int, 1)
			go func() { done <- run(notStopped(), tc.args, &out, &out) }()
			select {
			case code := <-done:
				if code != 1 || !strings.Contains(out.String(), tc.want) {
					t.Errorf("exit %d, output %q; want exit 1 and %q", code, out.String(), tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("did not end")
			}
		})
	}
}
