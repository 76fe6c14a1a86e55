package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
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

func newClient(t *testing.T, srv *httptest.Server, modify ...func(*Options)) *Client {
	t.Helper()
	o := Options{
		BaseURL:    srv.URL + "/api/v1",
		HTTPClient: srv.Client(),
		Token:      func() string { return testToken },
		UserAgent:  "breach_exporter/test",
	}
	for _, m := range modify {
		m(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
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
		wantUnauth  int // OnUnauthorized calls
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
		{name: "401", status: 401, body: `{"error":"unauthorized"}`, wantKind: KindUnauthorized, wantUnauth: 1},
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
			var unauth atomic.Int32
			c := newClient(t, srv, func(o *Options) { o.OnUnauthorized = func() { unauth.Add(1) } })

			b, _, err := c.Breaches(t.Context(), "alice@example.com")
			if got := int(unauth.Load()); got != tc.wantUnauth {
				t.Errorf("OnUnauthorized called %d times, want %d", got, tc.wantUnauth)
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
		Sources: []SourceState{{
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
		want   RateLimit
	}{
		{name: "present",
			header: map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "7", "X-RateLimit-Reset": strconv.Itoa(reset)},
			want:   RateLimit{Limit: 60, HasLimit: true, Remaining: 7, HasRemaining: true, Reset: time.Unix(reset, 0)}},
		{name: "remaining zero",
			header: map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.Itoa(reset)},
			want:   RateLimit{Limit: 60, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: time.Unix(reset, 0)}},
		{name: "absent", header: nil, want: RateLimit{}},
		{name: "only reset", header: map[string]string{"X-RateLimit-Reset": strconv.Itoa(reset)},
			want: RateLimit{Reset: time.Unix(reset, 0)}},
		{name: "garbage",
			header: map[string]string{"X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "1.7e9"},
			want:   RateLimit{}},
		{name: "empty values",
			header: map[string]string{"X-RateLimit-Limit": "", "X-RateLimit-Remaining": " ", "X-RateLimit-Reset": ""},
			want:   RateLimit{}},
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
			var codes []string
			c := newClient(t, srv, func(o *Options) {
				o.Timeout = 50 * time.Millisecond
				o.Observe = func(_, code string, _ time.Duration) { codes = append(codes, code) }
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
			if !reflect.DeepEqual(codes, []string{tc.wantCode}) {
				t.Errorf("observed codes %v, want [%s]", codes, tc.wantCode)
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
	var observed []string
	c, err := New(Options{
		BaseURL:    "http://" + addr + "/api/v1",
		HTTPClient: &http.Client{Transport: &http.Transport{}},
		Token:      func() string { return testToken },
		Observe:    func(endpoint, code string, _ time.Duration) { observed = append(observed, endpoint+" "+code) },
	})
	if err != nil {
		t.Fatal(err)
	}
	_, rl, err := c.Breaches(t.Context(), "alice@example.com")
	e := assertKind(t, err, KindTransport)
	if e.StatusCode != 0 {
		t.Errorf("StatusCode = %d, want 0", e.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not wrap ECONNREFUSED: %v", err)
	}
	if rl != (RateLimit{}) {
		t.Errorf("rate limit without a response: %+v", rl)
	}
	if !reflect.DeepEqual(observed, []string{"breaches error"}) {
		t.Errorf("observed %v, want [breaches error]", observed)
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
			c := newClient(t, srv, func(o *Options) { o.BaseURL = srv.URL + base })
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

func TestObserve(t *testing.T) {
	type call struct{ endpoint, code string }
	cases := []struct {
		status int
		want   string
	}{{200, "200"}, {404, "404"}, {429, "429"}, {500, "500"}, {418, "418"}}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			srv := newServer(t, respond(tc.status, nil, `{"id":"u","plan":"free","sources":[]}`))
			var calls []call
			c := newClient(t, srv, func(o *Options) {
				o.Observe = func(endpoint, code string, d time.Duration) {
					if d <= 0 {
						t.Errorf("non-positive duration %s", d)
					}
					calls = append(calls, call{endpoint, code})
				}
			})
			_, _, _ = c.Me(t.Context())
			_, _, _ = c.Breaches(t.Context(), "alice@example.com")
			want := []call{{EndpointMe, tc.want}, {EndpointBreaches, tc.want}}
			if !reflect.DeepEqual(calls, want) {
				t.Fatalf("observed %v, want %v", calls, want)
			}
		})
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
		mu     sync.Mutex
		token  = oldToken
		reread int
	)
	c := newClient(t, srv, func(o *Options) {
		o.Token = func() string { mu.Lock(); defer mu.Unlock(); return token }
		o.OnUnauthorized = func() { mu.Lock(); defer mu.Unlock(); reread++; token = newToken }
	})

	_, _, err := c.Me(t.Context())
	assertKind(t, err, KindUnauthorized)
	if strings.Contains(err.Error(), oldToken) {
		t.Errorf("error leaks the token: %v", err)
	}
	me, _, err := c.Me(t.Context())
	if err != nil {
		t.Fatalf("call after rotation: %v", err)
	}
	if me.Plan != "business" {
		t.Errorf("plan = %q", me.Plan)
	}
	if reread != 1 {
		t.Errorf("OnUnauthorized called %d times, want 1", reread)
	}
}

func TestServerMessageIsPassedOnRedacted(t *testing.T) {
	long := strings.Repeat("x", 1000)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/me" {
			respond(500, nil, `{"error":"`+long+`"}`)(w, r)
			return
		}
		respond(404, nil, `{"error":"not_monitored for `+testToken+`"}`)(w, r)
	})
	c := newClient(t, srv)
	_, _, err := c.Breaches(t.Context(), "alice@example.com")
	assertKind(t, err, KindNotMonitored)
	if !strings.Contains(err.Error(), `"not_monitored for <redacted>"`) {
		t.Errorf("server message missing or not redacted: %v", err)
	}
	_, _, err = c.Me(t.Context())
	assertKind(t, err, KindServer)
	if n := len(err.Error()); n > maxServerMessageLen+100 {
		t.Errorf("error message is %d bytes long: server text not truncated", n)
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

func TestNewValidates(t *testing.T) {
	token := func() string { return testToken }
	cases := []struct {
		name    string
		opts    Options
		wantErr string // empty: must succeed
	}{
		{name: "https", opts: Options{BaseURL: "https://h.example.com/api/v1", Token: token}},
		{name: "http trailing slash", opts: Options{BaseURL: "http://127.0.0.1:8080/api/v1/", Token: token}},
		{name: "empty", opts: Options{Token: token}, wantErr: "absolute http or https"},
		{name: "relative", opts: Options{BaseURL: "/api/v1", Token: token}, wantErr: "absolute http or https"},
		{name: "ftp", opts: Options{BaseURL: "ftp://h/api/v1", Token: token}, wantErr: "absolute http or https"},
		{name: "no host", opts: Options{BaseURL: "https:///api/v1", Token: token}, wantErr: "no host"},
		{name: "unparseable", opts: Options{BaseURL: "https://h/%zz", Token: token}, wantErr: "not a valid URL"},
		{name: "credentials", opts: Options{BaseURL: "https://u:hunter2@h/api/v1", Token: token}, wantErr: "credentials"},
		{name: "query", opts: Options{BaseURL: "https://h/api/v1?x=1", Token: token}, wantErr: "query"},
		{name: "no token func", opts: Options{BaseURL: "https://h/api/v1"}, wantErr: "Token"},
		{name: "negative timeout", opts: Options{BaseURL: "https://h/api/v1", Token: token, Timeout: -time.Second}, wantErr: "timeout"},
		{name: "negative cap", opts: Options{BaseURL: "https://h/api/v1", Token: token, MaxBodyBytes: -1}, wantErr: "cap"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.timeout != defaultTimeout || c.maxBodyBytes != defaultMaxBodyBytes || c.httpClient == nil {
					t.Errorf("defaults not applied: timeout %s, cap %d, client %v", c.timeout, c.maxBodyBytes, c.httpClient)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks URL credentials: %v", err)
			}
		})
	}
}
