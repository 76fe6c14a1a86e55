// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/listen"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func TestServerTimeouts(t *testing.T) {
	srv := NewServer(newFixture(t, settings{}).h, "/webhook")
	if srv.ReadHeaderTimeout != 3*time.Second || srv.ReadTimeout != 5*time.Second ||
		srv.WriteTimeout != 10*time.Second || srv.IdleTimeout != 60*time.Second {
		t.Fatalf("limits not as documented: %+v", srv)
	}
}

// startServer serves NewServer over a loopback port, as Serve would
// (the server's own limits apply, unlike httptest.NewServer's).
func startServer(t *testing.T, f *fixture) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = NewServer(f.h, "/webhook")
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// roundTrip writes a raw request on a new connection and reads the first
// response line.
func roundTrip(t *testing.T, addr, request string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// The header cap is what the README says, counted over the request line
// and the headers up to the blank line: 16 KiB passes, one byte more is 431.
func TestHeaderCapIs16KiB(t *testing.T) {
	addr := startServer(t, newFixture(t, settings{}))
	request := func(size int) string {
		head := "GET /-/healthy HTTP/1.1\r\nHost: x\r\nX-Pad: "
		tail := "\r\n\r\n"
		return head + strings.Repeat("a", size-len(head)-len(tail)) + tail
	}
	for size, want := range map[int]string{
		headerLimit:     "HTTP/1.1 200 OK",
		headerLimit + 1: "HTTP/1.1 431 Request Header Fields Too Large",
	} {
		if got := roundTrip(t, addr, request(size)); got != want {
			t.Errorf("%d bytes of request line and headers: %q, want %q", size, got, want)
		}
	}
}

// A client that announces a body over the cap and waits for "100 Continue"
// gets 413 instead, and its body is never asked for.
func TestExpectContinueOverTheCapIs413(t *testing.T) {
	f := newFixture(t, settings{MaxBodyBytes: 1000})
	addr := startServer(t, f)
	request := func(length int) string {
		return fmt.Sprintf("POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"X-Service-Signature: sha256=%064d\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", 0, length)
	}
	if got := roundTrip(t, addr, request(1001)); got != "HTTP/1.1 413 Request Entity Too Large" {
		t.Errorf("Content-Length over the cap with Expect: 100-continue: %q, want 413", got)
	}
	if got := f.outcomeCount(outcomeTooLarge); got != 1 {
		t.Errorf("too_large = %v, want 1", got)
	}
	// Within the cap the body is asked for.
	if got := roundTrip(t, addr, request(1000)); got != "HTTP/1.1 100 Continue" {
		t.Errorf("Content-Length within the cap with Expect: 100-continue: %q, want 100 Continue", got)
	}
}

func TestServerServesOnlyWebhookAndHealthy(t *testing.T) {
	f := newFixture(t, settings{})
	ts := httptest.NewServer(NewServer(f.h, "/webhook").Handler)
	defer ts.Close()

	body := []byte(validAlert)
	cases := []struct {
		method, path string
		signed       bool
		want         int
	}{
		{http.MethodPost, "/webhook", true, http.StatusNoContent},
		{http.MethodGet, "/-/healthy", false, http.StatusOK},
		{http.MethodHead, "/-/healthy", false, http.StatusOK},
		{http.MethodPost, "/-/healthy", false, http.StatusMethodNotAllowed},
		{http.MethodGet, "/metrics", false, http.StatusNotFound},
		{http.MethodPost, "/-/reload", false, http.StatusNotFound},
		{http.MethodPut, "/-/reload", false, http.StatusNotFound},
		{http.MethodGet, "/", false, http.StatusNotFound},
		{http.MethodPost, "/webhook/", true, http.StatusNotFound},
		{http.MethodPost, "/webhookx", true, http.StatusNotFound},
		{http.MethodPost, "//webhook", true, http.StatusNotFound},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, ts.URL+tc.path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.signed {
			req.Header.Set(SignatureHeader, sim.Sign(testSecret, body))
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	if got := f.outcomeCount(outcomeAccepted); got != 1 || f.outcomeSum() != 8 {
		t.Errorf("handler accepted %v requests (want only the one on its path), counted %v (want it and the 7 not_found)", got, f.outcomeSum())
	}
}

// freeAddress returns a loopback address that was free a moment ago;
// web.ListenAndServe opens its own listener, so the port cannot be handed
// over.
func freeAddress(t *testing.T) string {
	return testkit.FreeAddress(t)
}

// startServe runs Serve and returns a function that shuts it down and
// returns Serve's result.
func startServe(t *testing.T, srv *http.Server, addr, webConfig string) (stop func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- Serve(srv, addr, webConfig, testLimit, slog.New(slog.DiscardHandler)) }()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			t.Fatal("Serve did not return after Shutdown")
			return nil
		}
	}
}

// getUntilUp polls url until the listener answers, with a deadline.
func getUntilUp(t *testing.T, client *http.Client, req func() *http.Request) *http.Response {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Do(req())
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener never came up: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestServeAndShutdown(t *testing.T) {
	f := newFixture(t, settings{})
	srv := NewServer(f.h, "/webhook")
	addr := freeAddress(t)
	stop := startServe(t, srv, addr, "")

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp := getUntilUp(t, client, func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/-/healthy", nil)
		return req
	})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "Healthy\n" {
		t.Fatalf("healthy: %d %q", resp.StatusCode, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve after Shutdown = %v, want nil", err)
	}
}

func TestServeWithBasicAuthWebConfig(t *testing.T) {
	// bcrypt (cost 4) of "test-password", a throwaway test credential.
	const webConfig = "basic_auth_users:\n  sender: $2a$04$/vz26UzZt5XdPQec.rQOIu/bYZ558eMwqgjvsuMwEQ2oRTKgDv0om\n"
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte(webConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, settings{})
	srv := NewServer(f.h, "/hook")
	addr := freeAddress(t)
	stop := startServe(t, srv, addr, path)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	}()

	body := []byte(validAlert)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	newReq := func(user, pass string) func() *http.Request {
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hook", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(SignatureHeader, sim.Sign(testSecret, body))
			if user != "" {
				req.SetBasicAuth(user, pass)
			}
			return req
		}
	}
	resp := getUntilUp(t, client, newReq("", ""))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d, want 401", resp.StatusCode)
	}
	if got := f.outcomeSum(); got != 0 {
		t.Fatalf("the handler ran without basic auth credentials")
	}
	resp = getUntilUp(t, client, newReq("sender", "test-password"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("with credentials: %d, want 204", resp.StatusCode)
	}
}

// testLimit is the default limit, without metrics.
var testLimit = listen.Limit{Name: "webhook", MaxConnections: DefaultMaxConnections}

func TestServeErrors(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	h := newFixture(t, settings{}).h
	if err := Serve(NewServer(h, "/webhook"), "", "", testLimit, logger); err == nil {
		t.Error("Serve accepted an empty listen address")
	}

	bad := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Serve(NewServer(h, "/webhook"), freeAddress(t), bad, testLimit, logger); err == nil {
		t.Error("Serve accepted an unparseable web config")
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = Serve(NewServer(h, "/webhook"), busy.Addr().String(), "", testLimit, logger)
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("Serve on a busy port = %v, want a listen error", err)
	}
}
