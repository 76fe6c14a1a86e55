// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	commoncfg "github.com/prometheus/common/config"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "svc_ak_secret123"

// newServer starts a test server whose API root is /api/v1 and closes it
// when the test ends.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// newClient builds a client the way the exporter does: an HTTP client from
// prometheus/common carrying the User-Agent, the config's timeout and body
// cap, and metrics on a registry of the test's own (o.Metrics).
func newClient(t *testing.T, srv *httptest.Server, modify ...func(*Options)) *Client {
	t.Helper()
	httpClient, err := commoncfg.NewClientFromConfig(commoncfg.HTTPClientConfig{}, "test", commoncfg.WithUserAgent("breach_exporter/test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpClient.CloseIdleConnections)
	o := Options{
		BaseURL:      mustURL(t, srv.URL+"/api/v1"),
		HTTPClient:   httpClient,
		Token:        func() string { return testToken },
		Timeout:      10 * time.Second,
		MaxBodyBytes: 4 << 20,
		Metrics:      newMetrics(t),
		Account:      testAccount,
		// The decoder tests' clock, not the machine's: the malformed
		// replies hold fixed times "far ahead", which the real clock
		// would catch up with.
		Now: func() time.Time { return decodeNow },
	}
	for _, m := range modify {
		m(&o)
	}
	return New(o)
}

// testAccount is the account label of the test clients' series.
const testAccount = "corp"

func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// requests returns breach_api_requests_total for one endpoint and code.
func requests(m *Metrics, endpoint, code string) float64 {
	return testutil.ToFloat64(m.requests.WithLabelValues(testAccount, endpoint, code))
}

// respond returns a handler that answers every request the same way.
func respond(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func assertKind(t *testing.T, err error, want Kind) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want kind %s", want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *api.Error", err, err)
	}
	if e.Kind != want {
		t.Fatalf("kind = %s, want %s (error: %v)", e.Kind, want, err)
	}
	if strings.Contains(err.Error(), testToken) {
		t.Fatalf("error message leaks the token: %v", err)
	}
	return e
}

const goodBreaches = `{
  "email": "alice@example.com",
  "sources": [
    {
      "source": "archive",
      "breach_count": 3,
      "source_dbs": ["linkedin-2012", "adobe-2013"],
      "fields_exposed": ["password", "username"],
      "has_plaintext_password": true,
      "last_scanned_at": "2024-05-01T12:34:56.789Z",
      "last_changed_at": "2024-04-30T08:00:00.000Z"
    }
  ]
}`

func TestBreachesStatuses(t *testing.T) {
	const reset = 1700000060
	// Error bodies echo the token to prove it never reaches an error message.
	const errBody = `{"error":"nope ` + testToken + `"}`
	cases := []struct {
		name        string
		status      int
		header      map[string]string
		body        string
		wantKind    Kind // ignored when wantOK
		wantOK      bool
		wantRetryAt time.Time
	}{
		{name: "200", status: 200, body: goodBreaches, wantOK: true},
		{name: "200 empty sources", status: 200, body: `{"email":"alice@example.com","sources":[]}`, wantOK: true},
		{name: "200 sources absent", status: 200, body: `{"email":"alice@example.com"}`, wantKind: KindBadBody},
		{name: "200 truncated JSON", status: 200, body: goodBreaches[:len(goodBreaches)/2], wantKind: KindBadBody},
		{name: "200 empty body", status: 200, body: "", wantKind: KindBadBody},
		{name: "200 null", status: 200, body: "null", wantKind: KindBadBody},
		{name: "200 array", status: 200, body: "[]", wantKind: KindBadBody},
		{name: "200 html", status: 200, body: "<html>maintenance</html>", wantKind: KindBadBody},
		{name: "200 trailing garbage", status: 200, body: `{"sources":[]} x`, wantKind: KindBadBody},
		{name: "200 wrong type", status: 200, body: `{"sources":[{"source":"archive","breach_count":"3"}]}`, wantKind: KindBadBody},
		{name: "200 nameless source", status: 200, body: `{"sources":[{"breach_count":3}]}`, wantKind: KindBadBody},
		{name: "400", status: 400, body: errBody, wantKind: KindBadRequest},
		{name: "401", status: 401, body: `{"error":"unauthorized"}`, wantKind: KindUnauthorized},
		{name: "403", status: 403, body: errBody, wantKind: KindUnverified},
		{name: "404", status: 404, body: errBody, wantKind: KindNotMonitored},
		{name: "429 with reset", status: 429, header: map[string]string{"X-RateLimit-Reset": strconv.Itoa(reset)},
			body: `{"error":"rate_limited"}`, wantKind: KindRateLimited, wantRetryAt: time.Unix(reset, 0)},
		{name: "429 without reset", status: 429, body: `{"error":"rate_limited"}`, wantKind: KindRateLimited},
		{name: "429 garbage reset", status: 429, header: map[string]string{"X-RateLimit-Reset": "soon"},
			body: `{"error":"rate_limited"}`, wantKind: KindRateLimited},
		{name: "500", status: 500, body: errBody, wantKind: KindServer},
		{name: "502 html body", status: 502, body: "<html>bad gateway</html>", wantKind: KindServer},
		{name: "503 empty body", status: 503, wantKind: KindServer},
		{name: "418", status: 418, body: errBody, wantKind: KindUnexpected},
		{name: "204", status: 204, wantKind: KindUnexpected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, respond(tc.status, tc.header, tc.body))
			m := newMetrics(t)
			c := newClient(t, srv, func(o *Options) { o.Metrics = m })

			b, _, err := c.Breaches(t.Context(), "alice@example.com")
			if got := requests(m, EndpointBreaches, strconv.Itoa(tc.status)); got != 1 {
				t.Errorf("breach_api_requests_total{code=%q} = %v, want 1", strconv.Itoa(tc.status), got)
			}
			// Every failure is counted by kind, once; 403 and 404 are
			// answers about the address, not failures.
			var failures float64
			for _, k := range failureKinds {
				failures += testutil.ToFloat64(m.failures.WithLabelValues(testAccount, EndpointBreaches, k.String()))
			}
			wantFailures := 1.0
			if tc.wantOK || tc.wantKind == KindUnverified || tc.wantKind == KindNotMonitored {
				wantFailures = 0
			}
			if failures != wantFailures {
				t.Errorf("breach_api_request_failures_total = %v, want %v", failures, wantFailures)
			}
			if wantFailures == 1 {
				if got := testutil.ToFloat64(m.failures.WithLabelValues(testAccount, EndpointBreaches, tc.wantKind.String())); got != 1 {
					t.Errorf("failures of kind %s = %v, want 1", tc.wantKind, got)
				}
			}
			if tc.wantOK {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if b.Email != "alice@example.com" {
					t.Errorf("email = %q", b.Email)
				}
				return
			}
			e := assertKind(t, err, tc.wantKind)
			if e.StatusCode != tc.status {
				t.Errorf("StatusCode = %d, want %d", e.StatusCode, tc.status)
			}
			if !e.RetryAt.Equal(tc.wantRetryAt) {
				t.Errorf("RetryAt = %v, want %v", e.RetryAt, tc.wantRetryAt)
			}
			if !reflect.DeepEqual(b, Breaches{}) {
				t.Errorf("got data alongside an error: %+v", b)
			}
		})
	}
}

func TestBreachesDecodesEveryField(t *testing.T) {
	srv := newServer(t, respond(200, nil, goodBreaches))
	b, _, err := newClient(t, srv).Breaches(t.Context(), "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	want := Breaches{
		Email: "alice@example.com",
		Sources: []breach.SourceState{{
			Source:               "archive",
			BreachCount:          3,
			SourceDBs:            []string{"linkedin-2012", "adobe-2013"},
			FieldsExposed:        []string{"password", "username"},
			HasPlaintextPassword: true,
			LastScannedAt:        mustTime(t, "2024-05-01T12:34:56.789Z"),
			LastChangedAt:        mustTime(t, "2024-04-30T08:00:00Z"),
		}},
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("got  %+v\nwant %+v", b, want)
	}
}

func TestUnknownFieldsIgnoredAndUnknownEnumsKept(t *testing.T) {
	body := `{
	  "email": "alice@example.com",
	  "next_sweep": "tomorrow",
	  "sources": [
	    {
	      "source": "darkweb",
	      "breach_count": 1,
	      "source_dbs": ["forum-x"],
	      "fields_exposed": ["password", "ssn"],
	      "has_plaintext_password": false,
	      "last_scanned_at": "2024-05-01T12:34:56.789Z",
	      "last_changed_at": "2024-05-01T12:34:56.789Z",
	      "confidence": {"score": 0.9}
	    }
	  ]
	}`
	srv := newServer(t, respond(200, nil, body))
	b, _, err := newClient(t, srv).Breaches(t.Context(), "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Sources) != 1 || b.Sources[0].Source != "darkweb" {
		t.Fatalf("unknown source not kept: %+v", b.Sources)
	}
	if got := b.Sources[0].FieldsExposed; !reflect.DeepEqual(got, []string{"password", "ssn"}) {
		t.Fatalf("unknown field not kept: %v", got)
	}
}

func TestTimestampsWithAndWithoutMilliseconds(t *testing.T) {
	body := `{"email":"a@example.com","sources":[{"source":"index","breach_count":1,
	  "source_dbs":[],"fields_exposed":[],"has_plaintext_password":false,
	  "last_scanned_at":"2024-05-01T12:34:56.789Z",
	  "last_changed_at":"2024-05-01T12:34:56Z"}]}`
	srv := newServer(t, respond(200, nil, body))
	b, _, err := newClient(t, srv).Breaches(t.Context(), "a@example.com")
	if err != nil {
		t.Fatal(err)
	}
	s := b.Sources[0]
	if want := time.Date(2024, 5, 1, 12, 34, 56, 789_000_000, time.UTC); !s.LastScannedAt.Equal(want) {
		t.Errorf("with milliseconds: got %v, want %v", s.LastScannedAt, want)
	}
	if want := time.Date(2024, 5, 1, 12, 34, 56, 0, time.UTC); !s.LastChangedAt.Equal(want) {
		t.Errorf("without milliseconds: got %v, want %v", s.LastChangedAt, want)
	}
}

func TestMe(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		body     string
		want     Me
		wantKind Kind // used when want is zero
	}{
		{name: "200", status: 200, body: `{"id":"u1","email":"owner@example.com","plan":"pro"}`,
			want: Me{ID: "u1", Email: "owner@example.com", Plan: "pro"}},
		{name: "unknown plan and fields kept/ignored", status: 200, body: `{"id":"u1","email":"o@example.com","plan":"enterprise","org":{"id":7}}`,
			want: Me{ID: "u1", Email: "o@example.com", Plan: "enterprise"}},
		{name: "no plan", status: 200, body: `{"id":"u1","email":"o@example.com"}`, wantKind: KindBadBody},
		{name: "empty plan", status: 200, body: `{"id":"u1","plan":""}`, wantKind: KindBadBody},
		{name: "null", status: 200, body: `null`, wantKind: KindBadBody},
		{name: "truncated", status: 200, body: `{"id":"u1","pla`, wantKind: KindBadBody},
		{name: "401", status: 401, body: `{"error":"unauthorized"}`, wantKind: KindUnauthorized},
		{name: "429", status: 429, body: `{"error":"rate_limited"}`, wantKind: KindRateLimited},
		{name: "500", status: 500, wantKind: KindServer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var path string
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				path = r.URL.Path
				respond(tc.status, nil, tc.body)(w, r)
			})
			me, _, err := newClient(t, srv).Me(t.Context())
			if path != "/api/v1/me" {
				t.Errorf("path = %q, want /api/v1/me", path)
			}
			if tc.want != (Me{}) {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if me != tc.want {
					t.Fatalf("got %+v, want %+v", me, tc.want)
				}
				return
			}
			assertKind(t, err, tc.wantKind)
			if me != (Me{}) {
				t.Errorf("got data alongside an error: %+v", me)
			}
		})
	}
}

func TestRateLimitHeadersOnEveryResponse(t *testing.T) {
	const reset = 1700000060
	headerCases := []struct {
		name   string
		header map[string]string
		want   breach.RateLimit
	}{
		{name: "present",
			header: map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "7", "X-RateLimit-Reset": strconv.Itoa(reset)},
			want:   breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 7, HasRemaining: true, Reset: time.Unix(reset, 0)}},
		{name: "remaining zero",
			header: map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.Itoa(reset)},
			want:   breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: time.Unix(reset, 0)}},
		{name: "absent", header: nil, want: breach.RateLimit{}},
		{name: "only reset", header: map[string]string{"X-RateLimit-Reset": strconv.Itoa(reset)},
			want: breach.RateLimit{Reset: time.Unix(reset, 0)}},
		{name: "garbage",
			header: map[string]string{"X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "1.7e9"},
			want:   breach.RateLimit{}},
		{name: "empty values",
			header: map[string]string{"X-RateLimit-Limit": "", "X-RateLimit-Remaining": " ", "X-RateLimit-Reset": ""},
			want:   breach.RateLimit{}},
	}
	statuses := []struct {
		status int
		body   string
	}{{200, goodBreaches}, {200, "{broken"}, {401, ""}, {404, `{"error":"x"}`}, {429, `{"error":"rate_limited"}`}, {503, ""}}
	for _, hc := range headerCases {
		for _, st := range statuses {
			t.Run(hc.name+"/"+strconv.Itoa(st.status), func(t *testing.T) {
				srv := newServer(t, respond(st.status, hc.header, st.body))
				c := newClient(t, srv)
				_, rl, _ := c.Breaches(t.Context(), "alice@example.com")
				if !reflect.DeepEqual(rl, hc.want) {
					t.Errorf("Breaches: rate limit = %+v, want %+v", rl, hc.want)
				}
				_, rl, _ = c.Me(t.Context())
				if !reflect.DeepEqual(rl, hc.want) {
					t.Errorf("Me: rate limit = %+v, want %+v", rl, hc.want)
				}
			})
		}
	}
}

func TestBodySizeCap(t *testing.T) {
	body := `{"email":"alice@example.com","sources":[]}`
	cases := []struct {
		name   string
		cap    int64
		wantOK bool
	}{
		{name: "exactly at the cap", cap: int64(len(body)), wantOK: true},
		{name: "one byte over the cap", cap: int64(len(body)) - 1},
		{name: "far over the cap", cap: 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, respond(200, nil, body))
			c := newClient(t, srv, func(o *Options) { o.MaxBodyBytes = tc.cap })
			_, _, err := c.Breaches(t.Context(), "alice@example.com")
			if tc.wantOK {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			assertKind(t, err, KindBadBody)
			if !strings.Contains(err.Error(), "larger than") {
				t.Errorf("error does not say the body was too large: %v", err)
			}
		})
	}
}

func TestLargeBodyIsNotBufferedWhole(t *testing.T) {
	// The server would send 64 MiB; the client must stop after its cap
	// instead of reading everything first.
	const capBytes = 1024
	var written atomic.Int64
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		chunk := []byte(`{"sources":[` + strings.Repeat(" ", 4096))
		for i := 0; i < 64<<20/len(chunk); i++ {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	c := newClient(t, srv, func(o *Options) { o.MaxBodyBytes = capBytes })
	_, _, err := c.Breaches(t.Context(), "alice@example.com")
	assertKind(t, err, KindBadBody)
	srv.Close() // waits for the handler, so written is final
	if w := written.Load(); w >= 64<<20-8192 {
		t.Fatalf("server managed to write %d bytes: the client read the whole body", w)
	}
}

func TestTruncatedBodyOnTheWire(t *testing.T) {
	// The server promises more bytes than it sends, then hangs up.
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"email":"alice@example.com","sou`))
	})
	_, _, err := newClient(t, srv).Breaches(t.Context(), "alice@example.com")
	assertKind(t, err, KindBadBody)
}

// hangingServer answers nothing (or only headers and part of the body)
// until the test ends.
func hangingServer(t *testing.T, sendHeaders bool) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if sendHeaders {
			w.WriteHeader(200)
			_, _ = w.Write([]byte(`{"email":`))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	// Registered after srv.Close, so it runs first and Close does not wait forever.
	t.Cleanup(func() { close(release) })
	return srv
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sendHeaders bool
		wantCode    string
	}{
		{name: "no response", sendHeaders: false, wantCode: "error"},
		{name: "body stalls", sendHeaders: true, wantCode: "200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := hangingServer(t, tc.sendHeaders)
			m := newMetrics(t)
			c := newClient(t, srv, func(o *Options) {
				o.Timeout = 50 * time.Millisecond
				o.Metrics = m
			})
			// The outer deadline only stops a broken client from hanging
			// the suite; the elapsed check below proves Timeout fired.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, _, err := c.Breaches(ctx, "alice@example.com")
			elapsed := time.Since(start)
			assertKind(t, err, KindTransport)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error does not wrap context.DeadlineExceeded: %v", err)
			}
			if elapsed > 2*time.Second {
				t.Errorf("call took %s: the per-request timeout did not fire", elapsed)
			}
			if got := requests(m, EndpointBreaches, tc.wantCode); got != 1 {
				t.Errorf("breach_api_requests_total{code=%q} = %v, want 1", tc.wantCode, got)
			}
		})
	}
}

func TestCallerCancellation(t *testing.T) {
	srv := hangingServer(t, false)
	c := newClient(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := c.Me(ctx)
	assertKind(t, err, KindTransport)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error does not wrap context.Canceled: %v", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	c := New(Options{
		BaseURL:      mustURL(t, "http://"+addr+"/api/v1"),
		HTTPClient:   &http.Client{Transport: &http.Transport{}},
		Token:        func() string { return testToken },
		Timeout:      10 * time.Second,
		MaxBodyBytes: 4 << 20,
		Metrics:      m,
		Account:      testAccount,
		Now:          time.Now,
	})
	_, rl, err := c.Breaches(t.Context(), "Secret.Person@example.com")
	e := assertKind(t, err, KindTransport)
	// The URL of the request is in the error, but not its query: the
	// address goes into logs only as its label.
	if msg := strings.ToLower(err.Error()); strings.Contains(msg, "secret") || !strings.Contains(msg, addr+"/api/v1/breaches?<redacted>") {
		t.Errorf("error shows the address or no URL at all: %v", err)
	}
	if e.StatusCode != 0 {
		t.Errorf("StatusCode = %d, want 0", e.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not wrap ECONNREFUSED: %v", err)
	}
	if rl != (breach.RateLimit{}) {
		t.Errorf("rate limit without a response: %+v", rl)
	}
	if requests(m, EndpointBreaches, "error") != 1 || testutil.ToFloat64(m.failures.WithLabelValues(testAccount, EndpointBreaches, "transport")) != 1 {
		t.Errorf("a refused connection must count once as code \"error\" and kind transport")
	}
}

func TestRequestHeadersAndQuery(t *testing.T) {
	for _, base := range []string{"/api/v1", "/api/v1/"} {
		t.Run("base "+base, func(t *testing.T) {
			type seen struct {
				path, rawQuery, email    string
				auth, ua, accept, method string
			}
			var got []seen
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				got = append(got, seen{
					path: r.URL.Path, rawQuery: r.URL.RawQuery, email: r.URL.Query().Get("email"),
					auth: r.Header.Get("Authorization"), ua: r.Header.Get("User-Agent"),
					accept: r.Header.Get("Accept"), method: r.Method,
				})
				if r.URL.Path == "/api/v1/me" {
					respond(200, nil, `{"id":"u","email":"o@example.com","plan":"free"}`)(w, r)
					return
				}
				respond(200, nil, `{"email":"a+b@example.com","sources":[]}`)(w, r)
			})
			c := newClient(t, srv, func(o *Options) { o.BaseURL = mustURL(t, srv.URL+base) })
			if _, _, err := c.Breaches(t.Context(), "a+b@example.com"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Me(t.Context()); err != nil {
				t.Fatal(err)
			}
			common := seen{auth: "Bearer " + testToken, ua: "breach_exporter/test", accept: "application/json", method: "GET"}
			want := []seen{common, common}
			want[0].path, want[0].rawQuery, want[0].email = "/api/v1/breaches", "email=a%2Bb%40example.com", "a+b@example.com"
			want[1].path = "/api/v1/me"
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("requests:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// Every request is counted by endpoint and status, and timed, in the one
// set of metrics every client shares.
func TestMetrics(t *testing.T) {
	cases := []struct {
		status int
		want   string
	}{{200, "200"}, {404, "404"}, {429, "429"}, {500, "500"}, {418, "418"}}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			srv := newServer(t, respond(tc.status, nil, `{"id":"u","email":"o@example.com","plan":"free","sources":[]}`))
			m := newMetrics(t)
			// Two clients, as across a reload: both count into m.
			for range 2 {
				c := newClient(t, srv, func(o *Options) { o.Metrics = m })
				_, _, _ = c.Me(t.Context())
				_, _, _ = c.Breaches(t.Context(), "alice@example.com")
			}
			for _, ep := range []string{EndpointMe, EndpointBreaches} {
				if got := requests(m, ep, tc.want); got != 2 {
					t.Errorf("breach_api_requests_total{endpoint=%q,code=%q} = %v, want 2", ep, tc.want, got)
				}
			}
			if n := testutil.CollectAndCount(m.duration); n != 2 {
				t.Errorf("%d duration series, want one per endpoint", n)
			}
		})
	}
}

// The series the alert rules read exist at 0 before any request, so that
// increase() sees the first 401 or 429; per account, from its first
// client on, until the account is forgotten.
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.account("corp")
	m.account("labs")
	m.account("corp") // a reload's new client: the same series
	want := `
# HELP breach_api_requests_total Requests sent to the breach API, by endpoint and HTTP status code ("error" when no response arrived).
# TYPE breach_api_requests_total counter
breach_api_requests_total{account="corp",code="200",endpoint="breaches"} 0
breach_api_requests_total{account="corp",code="200",endpoint="me"} 0
breach_api_requests_total{account="corp",code="401",endpoint="breaches"} 0
breach_api_requests_total{account="corp",code="401",endpoint="me"} 0
breach_api_requests_total{account="corp",code="429",endpoint="breaches"} 0
breach_api_requests_total{account="corp",code="429",endpoint="me"} 0
breach_api_requests_total{account="labs",code="200",endpoint="breaches"} 0
breach_api_requests_total{account="labs",code="200",endpoint="me"} 0
breach_api_requests_total{account="labs",code="401",endpoint="breaches"} 0
breach_api_requests_total{account="labs",code="401",endpoint="me"} 0
breach_api_requests_total{account="labs",code="429",endpoint="breaches"} 0
breach_api_requests_total{account="labs",code="429",endpoint="me"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breach_api_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "breach_api_request_failures_total"); n != 2*2*len(failureKinds) {
		t.Errorf("%d failure series at start, want %d", n, 2*2*len(failureKinds))
	}
	m.Forget("labs")
	if n := testutil.CollectAndCount(reg, "breach_api_request_failures_total", "breach_api_requests_total", "breach_api_request_duration_seconds"); n != 2*len(failureKinds)+2*len(codesFromStart)+2 {
		t.Errorf("%d series after labs is forgotten, want corp's %d", n, 2*len(failureKinds)+2*len(codesFromStart)+2)
	}
}

func TestUnauthorizedThenRotatedToken(t *testing.T) {
	const oldToken, newToken = "svc_ak_old", "svc_ak_new"
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+newToken {
			respond(401, nil, `{"error":"unauthorized"}`)(w, r)
			return
		}
		respond(200, nil, `{"id":"u","email":"o@example.com","plan":"business"}`)(w, r)
	})
	var (
		mu    sync.Mutex
		token = oldToken
		asked int
	)
	c := newClient(t, srv, func(o *Options) {
		o.Token = func() string { mu.Lock(); defer mu.Unlock(); asked++; return token }
	})

	_, _, err := c.Me(t.Context())
	assertKind(t, err, KindUnauthorized)
	if strings.Contains(err.Error(), oldToken) {
		t.Errorf("error leaks the token: %v", err)
	}
	// The scheduler has the file re-read after a 401; the client asks for
	// the token on every request, so the next one carries the new token.
	mu.Lock()
	token = newToken
	mu.Unlock()
	me, _, err := c.Me(t.Context())
	if err != nil {
		t.Fatalf("call after rotation: %v", err)
	}
	if me.Plan != "business" {
		t.Errorf("plan = %q", me.Plan)
	}
	if asked != 2 {
		t.Errorf("Token asked %d times for 2 requests, want 2", asked)
	}
}

func TestServerMessageIsPassedOnRedacted(t *testing.T) {
	long := strings.Repeat("x", 1000)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/me" {
			respond(500, nil, `{"error":"`+long+`"}`)(w, r)
			return
		}
		respond(400, nil, `{"error":"bad_request for `+testToken+` (Alice@Example.com, email=alice%40example.com, other bob@example.org)"}`)(w, r)
	})
	c := newClient(t, srv)
	_, _, err := c.Breaches(t.Context(), "alice@example.com")
	assertKind(t, err, KindBadRequest)
	if want := `"bad_request for <redacted> (<address>, <address>, other <address>)"`; !strings.Contains(err.Error(), want) {
		t.Errorf("server message missing or not redacted: %v, want %s", err, want)
	}
	_, _, err = c.Me(t.Context())
	assertKind(t, err, KindServer)
	if n := len(err.Error()); n > maxServerMessageLen+100 {
		t.Errorf("error message is %d bytes long: server text not truncated", n)
	}
}

// A server that repeats the token in its data (as a feed, a database, a
// field, a time or an id) sends a bad body: nothing of it is kept, and the
// error names the member without the value.
func TestAnswerRepeatingTheTokenIsABadBody(t *testing.T) {
	for name, body := range map[string]string{
		"source":          breachesWith(withMember("source", `"`+testToken+`"`)),
		"database":        breachesWith(withMember("source_dbs", `["LinkedIn","dump of `+testToken+`"]`)),
		"field":           breachesWith(withMember("fields_exposed", `["`+testToken+`"]`)),
		"last_scanned_at": breachesWith(withMember("last_scanned_at", `"`+testToken+`"`)),
		"email":           `{"email":"` + testToken + `","sources":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, respond(200, nil, body))
			b, _, err := newClient(t, srv).Breaches(t.Context(), askedFor)
			assertKind(t, err, KindBadBody) // also checks the token is not in the error
			if !reflect.DeepEqual(b, Breaches{}) {
				t.Errorf("data alongside the error: %+v", b)
			}
			if strings.Contains(err.Error(), "secret123") {
				t.Errorf("error quotes the token: %v", err)
			}
		})
	}
	for _, member := range []string{"id", "plan"} {
		t.Run("me "+member, func(t *testing.T) {
			fields := map[string]string{"id": "u1", "email": "owner@example.com", "plan": "pro"}
			fields[member] = "x" + testToken
			srv := newServer(t, respond(200, nil, `{"id":"`+fields["id"]+`","email":"owner@example.com","plan":"`+fields["plan"]+`"}`))
			m, _, err := newClient(t, srv).Me(t.Context())
			assertKind(t, err, KindBadBody)
			if m != (Me{}) || !strings.Contains(err.Error(), member+" repeats the API token") {
				t.Errorf("got %+v, %v", m, err)
			}
		})
	}
}

func TestConnectionsAreReused(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/me":
			respond(200, nil, `{"id":"u","email":"o@example.com","plan":"free"}`)(w, r)
		default:
			respond(404, nil, `{"error":"`+strings.Repeat("x", 64<<10)+`"}`)(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, srv)
	for range 3 {
		_, _, _ = c.Breaches(t.Context(), "alice@example.com")
		_, _, _ = c.Me(t.Context())
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 6 sequential requests, want 1", n)
	}
}
