// SPDX-License-Identifier: Apache-2.0

package ackweb_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"

	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Behind exporter-toolkit with basic_auth_users, as the exporter serves
// it: no credentials and a wrong password never reach the handler (401);
// the right ones write. The handler reads the web config as the toolkit
// does, at every request: once the users are gone, a user name is no
// longer trusted.
func TestToolkitChecksPasswords(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	testkit.WriteFile(t, webConfig, "basic_auth_users:\n  oncall: "+string(hash)+"\n")
	auth, err := ackweb.ReadWebConfig(webConfig)
	if err != nil || !auth.BasicAuth || auth.ClientCerts {
		t.Fatalf("ReadWebConfig = %+v, %v; want basic auth", auth, err)
	}
	f := newFixture(t, "", ackweb.Options{Write: true, WebConfigFile: webConfig})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: f.h}
	done := make(chan error, 1)
	go func() {
		done <- web.Serve(l, server, &web.FlagConfig{WebConfigFile: &webConfig}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		server.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})
	post := func(user, password string) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+l.Addr().String()+ackweb.APIPath, strings.NewReader(`{"address":"`+alice+`","source":"combolist","by":"Ada"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("", ""); got != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", got)
	}
	if got := post("oncall", "wrong"); got != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", got)
	}
	if got := f.list(); len(got) != 0 {
		t.Fatalf("refused requests acknowledged: %v", got)
	}
	if got := post("oncall", "right"); got != http.StatusCreated {
		t.Errorf("right password: %d, want 201", got)
	}
	// Without users the toolkit checks no password: the page must no
	// longer take the request's user name as authenticated.
	testkit.WriteFile(t, webConfig, "{}\n")
	if got := post("mallory", "anything"); got != http.StatusUnauthorized {
		t.Errorf("after the users were removed from the web config: %d, want 401", got)
	}
}

// A web config without users or required client certificates lets no
// write through; a missing file is an error.
func TestReadWebConfig(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]ackweb.Auth{
		"": {},
		"tls_server_config:\n  client_auth_type: RequestClientCert\n":          {},
		"tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n": {ClientCerts: true},
	} {
		path := filepath.Join(dir, "web.yml")
		testkit.WriteFile(t, path, content)
		got, err := ackweb.ReadWebConfig(path)
		if err != nil || got.BasicAuth != want.BasicAuth || got.ClientCerts != want.ClientCerts || got.Any() != want.ClientCerts {
			t.Errorf("ReadWebConfig(%q) = %+v, %v; want %+v", content, got, err, want)
		}
	}
	if _, err := ackweb.ReadWebConfig(filepath.Join(dir, "missing.yml")); err == nil {
		t.Error("a missing web config read without an error")
	}
}

// The external URL gives the page's URL; a relative or odd one is refused.
func TestPageURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "",
		"https://breach.example.com":   "https://breach.example.com/acknowledge",
		"https://example.com/breach/":  "https://example.com/breach/acknowledge",
		"http://127.0.0.1:9799/prefix": "http://127.0.0.1:9799/prefix/acknowledge",
	} {
		if got, err := ackweb.PageURL(in); err != nil || got != want {
			t.Errorf("PageURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"breach.example.com", "ftp://x/", "https://x/?a=b", "/relative"} {
		if _, err := ackweb.PageURL(bad); err == nil {
			t.Errorf("PageURL(%q) accepted", bad)
		}
	}
}
