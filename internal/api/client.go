package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	defaultTimeout      = 10 * time.Second
	defaultMaxBodyBytes = 4 << 20

	// The service's own error text only goes into log messages, so a
	// misbehaving server must not be able to flood them.
	maxServerMessageLen = 200
)

// Options configures a Client. Only BaseURL and Token are required.
type Options struct {
	BaseURL        string        // API root including the version, e.g. https://host/api/v1
	HTTPClient     *http.Client  // carries TLS and proxy settings; nil means a default client
	Token          func() string // the current bearer token, asked for on every request so a rotation is picked up
	OnUnauthorized func()        // called after every 401 so the caller can re-read the token; may be nil
	UserAgent      string        // "breach_exporter/<version>"
	Timeout        time.Duration // per request, including reading the body; 0 means 10s
	MaxBodyBytes   int64         // response body cap; 0 means 4 MiB
	// Observe, when set, is told about every request: endpoint is
	// EndpointMe or EndpointBreaches, code the HTTP status as a decimal
	// string or "error" when no response arrived.
	Observe func(endpoint, code string, d time.Duration)
}

// Client calls the service's JSON API. It is safe for concurrent use. It
// never retries: when to try again is the scheduler's decision, because
// every request costs rate budget.
type Client struct {
	meURL          string
	breachesURL    *url.URL
	httpClient     *http.Client
	token          func() string
	onUnauthorized func()
	userAgent      string
	timeout        time.Duration
	maxBodyBytes   int64
	observe        func(endpoint, code string, d time.Duration)
}

// New checks o and returns a Client.
func New(o Options) (*Client, error) {
	base, err := parseBaseURL(o.BaseURL)
	if err != nil {
		return nil, err
	}
	if o.Token == nil {
		return nil, errors.New("api: Options.Token is required")
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("api: timeout must not be negative, got %s", o.Timeout)
	}
	if o.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("api: body size cap must not be negative, got %d", o.MaxBodyBytes)
	}
	c := &Client{
		meURL:          base.JoinPath("me").String(),
		breachesURL:    base.JoinPath("breaches"),
		httpClient:     o.HTTPClient,
		token:          o.Token,
		onUnauthorized: o.OnUnauthorized,
		userAgent:      o.UserAgent,
		timeout:        o.Timeout,
		maxBodyBytes:   o.MaxBodyBytes,
		observe:        o.Observe,
	}
	if c.httpClient == nil {
		c.httpClient = &http.Client{}
	}
	if c.timeout == 0 {
		c.timeout = defaultTimeout
	}
	if c.maxBodyBytes == 0 {
		c.maxBodyBytes = defaultMaxBodyBytes
	}
	if c.onUnauthorized == nil {
		c.onUnauthorized = func() {}
	}
	if c.observe == nil {
		c.observe = func(string, string, time.Duration) {}
	}
	return c, nil
}

func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's message repeats the input, which may hold credentials.
		return nil, errors.New("api: base URL is not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("api: base URL %q must be an absolute http or https URL", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("api: base URL %q has no host", u.Redacted())
	case u.User != nil:
		return nil, fmt.Errorf("api: base URL %q must not contain credentials; the token is sent as a Bearer header", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("api: base URL %q must not have a query or fragment", u.Redacted())
	}
	return u, nil
}

// Me calls GET /me. The RateLimit is returned even alongside an error,
// whenever a response arrived.
func (c *Client) Me(ctx context.Context) (Me, RateLimit, error) {
	var m Me
	rl, err := c.get(ctx, EndpointMe, c.meURL, func(body []byte) (err error) {
		m, err = DecodeMe(body)
		return err
	})
	if err != nil {
		return Me{}, rl, err
	}
	return m, rl, nil
}

// Breaches calls GET /breaches for one address. The RateLimit is returned
// even alongside an error, whenever a response arrived.
func (c *Client) Breaches(ctx context.Context, email string) (Breaches, RateLimit, error) {
	u := *c.breachesURL
	u.RawQuery = url.Values{"email": {email}}.Encode()
	var b Breaches
	rl, err := c.get(ctx, EndpointBreaches, u.String(), func(body []byte) (err error) {
		b, err = DecodeBreaches(body, email)
		return err
	})
	if err != nil {
		return Breaches{}, rl, err
	}
	return b, rl, nil
}

// get sends one GET and hands a 200 body to decode (DecodeMe or
// DecodeBreaches, which hold it to the spec); a decode error is a
// KindBadBody failure, any other status an *Error.
func (c *Client) get(ctx context.Context, endpoint, rawURL string, decode func(body []byte) error) (RateLimit, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return RateLimit{}, &Error{Kind: KindTransport, Err: err}
	}
	token := c.token()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}

	start := time.Now()
	resp, err := c.httpClient.Do(req)
	if err != nil {
		c.observe(endpoint, "error", time.Since(start))
		return RateLimit{}, &Error{Kind: KindTransport, Err: err}
	}
	// Reading to the end (within the cap) before closing lets the
	// transport reuse the connection, error responses included.
	body, tooBig, readErr := readCapped(resp.Body, c.maxBodyBytes)
	resp.Body.Close()
	c.observe(endpoint, strconv.Itoa(resp.StatusCode), time.Since(start))

	rl := parseRateLimit(resp.Header)
	if resp.StatusCode != http.StatusOK {
		return rl, c.statusError(resp.StatusCode, rl, body, token)
	}
	switch {
	case readErr != nil && ctx.Err() != nil:
		return rl, &Error{Kind: KindTransport, StatusCode: resp.StatusCode, Err: fmt.Errorf("reading body: %w", readErr)}
	case readErr != nil:
		return rl, badBody(fmt.Errorf("reading body: %w", readErr))
	case tooBig:
		return rl, badBody(fmt.Errorf("body is larger than %d bytes", c.maxBodyBytes))
	}
	if err := decode(body); err != nil {
		return rl, badBody(fmt.Errorf("decoding %s body: %w", endpoint, err))
	}
	return rl, nil
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
func (c *Client) statusError(status int, rl RateLimit, body []byte, token string) *Error {
	e := &Error{StatusCode: status, Err: serverMessage(body, token)}
	switch {
	case status == http.StatusBadRequest:
		e.Kind = KindBadRequest
	case status == http.StatusUnauthorized:
		e.Kind = KindUnauthorized
		c.onUnauthorized()
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

// serverMessage returns the error text of a documented {"error": "..."}
// body, or nil. The token is blanked in case a server echoes it back.
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
	if len(msg) > maxServerMessageLen {
		msg = strings.ToValidUTF8(msg[:maxServerMessageLen], "") + "..."
	}
	return fmt.Errorf("server said %q", msg)
}

// parseRateLimit reads the rate-limit headers; an absent or unparseable
// header leaves its field zero, since a bad header must not fail a
// request that otherwise succeeded.
func parseRateLimit(h http.Header) RateLimit {
	var rl RateLimit
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
