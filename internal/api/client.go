// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The service's own error text only goes into log messages, so a
// misbehaving server must not be able to flood them.
const maxServerMessageLen = 200

// Options configures a Client. Every field is required; the config package
// has validated the values, so New trusts them.
type Options struct {
	BaseURL      *url.URL      // API root including the version, e.g. https://host/api/v1
	HTTPClient   *http.Client  // carries TLS, proxy settings and the User-Agent
	Token        func() string // the current bearer token, asked for on every request so a rotation is picked up
	Timeout      time.Duration // per request, including reading the body
	MaxBodyBytes int64         // response body cap
	Metrics      *Metrics      // shared by every Client of the process
	Account      string        // the account whose key Token is: the metrics' account label
	// Now is the exporter's clock: an answer's date-times may not be far
	// ahead of it (DecodeBreaches).
	Now func() time.Time
}

// Client calls the service's JSON API. It is safe for concurrent use. It
// never retries: when to try again is the scheduler's decision, because
// every request costs rate budget.
//
// A 401 is reported as KindUnauthorized and nothing more: the scheduler,
// which owns the budget, pauses and has the token file re-read.
type Client struct {
	meURL        string
	breachesURL  *url.URL
	httpClient   *http.Client
	token        func() string
	timeout      time.Duration
	maxBodyBytes int64
	metrics      *accountMetrics
	now          func() time.Time
}

// New returns a Client for o.
func New(o Options) *Client {
	return &Client{
		meURL:        o.BaseURL.JoinPath("me").String(),
		breachesURL:  o.BaseURL.JoinPath("breaches"),
		httpClient:   o.HTTPClient,
		token:        o.Token,
		timeout:      o.Timeout,
		maxBodyBytes: o.MaxBodyBytes,
		metrics:      o.Metrics.account(o.Account),
		now:          o.Now,
	}
}

// Me calls GET /me. The RateLimit is returned even alongside an error,
// whenever a response arrived.
func (c *Client) Me(ctx context.Context) (Me, breach.RateLimit, error) {
	var m Me
	rl, err := c.call(ctx, EndpointMe, c.meURL, func(body []byte, token string) (err error) {
		if m, err = DecodeMe(body); err != nil {
			return err
		}
		return echoes(token, map[string][]string{"id": {m.ID}, "email": {m.Email}, "plan": {m.Plan}})
	})
	if err != nil {
		m = Me{}
	}
	return m, rl, err
}

// Breaches calls GET /breaches for one address. The RateLimit is returned
// even alongside an error, whenever a response arrived.
func (c *Client) Breaches(ctx context.Context, email string) (Breaches, breach.RateLimit, error) {
	u := *c.breachesURL
	u.RawQuery = url.Values{"email": {email}}.Encode()
	var b Breaches
	rl, err := c.call(ctx, EndpointBreaches, u.String(), func(body []byte, token string) (err error) {
		if b, err = DecodeBreaches(body, email, c.now()); err != nil {
			return err
		}
		for i, s := range b.Sources {
			if err := echoes(token, map[string][]string{"source": {s.Source}, "source_dbs": s.SourceDBs, "fields_exposed": s.FieldsExposed}); err != nil {
				return fmt.Errorf("sources[%d]: %w", i, err)
			}
		}
		return echoes(token, map[string][]string{"email": {b.Email}})
	})
	if err != nil {
		b = Breaches{}
	}
	return b, rl, err
}

// echoes reports an error when a value of a decoded answer contains the
// token. A server that repeats the bearer token in its data is broken, and
// whatever it sent would put the token into a label (and the whole answer
// is suspect): the answer is a bad body, so the address keeps its last good
// values, and the error names the member, never the value.
func echoes(token string, values map[string][]string) error {
	if token == "" {
		return nil
	}
	for member, list := range values {
		for _, v := range list {
			if strings.Contains(v, token) {
				return fmt.Errorf("%s repeats the API token", member)
			}
		}
	}
	return nil
}

// call sends one GET, decodes a 200 body with decode (given the token the
// request carried), and records the request, its duration and any failure:
// the one place the API's metrics are written.
func (c *Client) call(ctx context.Context, endpoint, rawURL string, decode func(body []byte, token string) error) (breach.RateLimit, error) {
	start := time.Now()
	code, rl, e := c.get(ctx, rawURL, decode)
	c.metrics.requests.WithLabelValues(endpoint, code).Inc()
	c.metrics.duration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	if e == nil {
		return rl, nil
	}
	c.metrics.failed(endpoint, e)
	return rl, e
}

// get sends one GET and decodes a 200 body; any other status becomes an
// *Error. code is the HTTP status, or "error" when no response arrived.
func (c *Client) get(ctx context.Context, rawURL string, decode func([]byte, string) error) (code string, rl breach.RateLimit, e *Error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "error", rl, &Error{Kind: KindTransport, Err: withoutQuery(err)}
	}
	token := c.token()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")

	resp, err := c.httpClient.Do(req)
	if err != nil {
		return "error", rl, &Error{Kind: KindTransport, Err: withoutQuery(err)}
	}
	// Reading to the end (within the cap) before closing lets the
	// transport reuse the connection, error responses included.
	body, tooBig, readErr := readCapped(resp.Body, c.maxBodyBytes)
	resp.Body.Close()
	code = strconv.Itoa(resp.StatusCode)

	rl = parseRateLimit(resp.Header)
	if resp.StatusCode != http.StatusOK {
		return code, rl, c.statusError(resp.StatusCode, rl, body, token)
	}
	switch {
	case readErr != nil && ctx.Err() != nil:
		return code, rl, &Error{Kind: KindTransport, StatusCode: resp.StatusCode, Err: fmt.Errorf("reading body: %w", readErr)}
	case readErr != nil:
		return code, rl, badBody(fmt.Errorf("reading body: %w", readErr))
	case tooBig:
		return code, rl, badBody(fmt.Errorf("body is larger than %d bytes", c.maxBodyBytes))
	}
	if err := decode(body, token); err != nil {
		return code, rl, badBody(err)
	}
	return code, rl, nil
}

// withoutQuery drops the query from the URL an *url.Error repeats: the
// query of /breaches is the address, which the caller's logs show only as
// its label (labels.address).
func withoutQuery(err error) error {
	var urlErr *url.Error
	if !errors.As(err, &urlErr) {
		return err
	}
	shown := urlErr.URL
	if u, perr := url.Parse(urlErr.URL); perr == nil {
		if u.RawQuery != "" {
			u.RawQuery = "<redacted>"
		}
		shown = u.Redacted()
	} else if i := strings.IndexByte(shown, '?'); i >= 0 {
		shown = shown[:i] + "?<redacted>"
	}
	return &url.Error{Op: urlErr.Op, URL: shown, Err: urlErr.Err}
}

func badBody(err error) *Error {
	return &Error{Kind: KindBadBody, StatusCode: http.StatusOK, Err: err}
}

// readCapped reads r up to limit bytes. tooBig reports that r had more.
func readCapped(r io.Reader, limit int64) (data []byte, tooBig bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(data)) > limit {
		return data[:limit], true, err
	}
	return data, false, err
}

// statusError classifies a non-200 response by its status alone: the spec
// leaves most error-code texts open, so they are only passed on for logs.
func (c *Client) statusError(status int, rl breach.RateLimit, body []byte, token string) *Error {
	e := &Error{StatusCode: status, Err: serverMessage(body, token)}
	switch {
	case status == http.StatusBadRequest:
		e.Kind = KindBadRequest
	case status == http.StatusUnauthorized:
		e.Kind = KindUnauthorized
	case status == http.StatusForbidden:
		e.Kind = KindUnverified
	case status == http.StatusNotFound:
		e.Kind = KindNotMonitored
	case status == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
		e.RetryAt = rl.Reset
	case status >= 500 && status <= 599:
		e.Kind = KindServer
	default:
		e.Kind = KindUnexpected
	}
	return e
}

// addressLike is anything in a server's message that may be an email
// address, plain or percent-encoded as in a query.
var addressLike = regexp.MustCompile(`(?i)[^\s"'<>(),;]*(?:@|%40)[^\s"'<>(),;]*`)

// serverMessage returns the error text of a documented {"error": "..."}
// body, or nil. The token and anything like an address are blanked in case
// a server echoes them back: the logs show an address only as its label.
func serverMessage(body []byte, token string) error {
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
		return nil
	}
	msg := eb.Error
	if token != "" {
		msg = strings.ReplaceAll(msg, token, "<redacted>")
	}
	msg = addressLike.ReplaceAllLiteralString(msg, "<address>")
	if len(msg) > maxServerMessageLen {
		msg = strings.ToValidUTF8(msg[:maxServerMessageLen], "") + "..."
	}
	return fmt.Errorf("server said %q", msg)
}

// parseRateLimit reads the rate-limit headers; an absent or unparseable
// header leaves its field zero, since a bad header must not fail a
// request that otherwise succeeded.
func parseRateLimit(h http.Header) breach.RateLimit {
	var rl breach.RateLimit
	if n, ok := parseCount(h.Get("X-RateLimit-Limit")); ok {
		rl.Limit, rl.HasLimit = n, true
	}
	if n, ok := parseCount(h.Get("X-RateLimit-Remaining")); ok {
		rl.Remaining, rl.HasRemaining = n, true
	}
	if sec, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 10, 64); err == nil && sec > 0 {
		rl.Reset = time.Unix(sec, 0)
	}
	return rl
}

func parseCount(v string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
