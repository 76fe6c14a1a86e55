package exporter

import (
	"context"
	"sync"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/scheduler"
)

// swappableClient lets a reload replace the API client (a new base_url, TLS
// config or token file) under a scheduler that keeps running.
type swappableClient struct {
	mu      sync.RWMutex
	current *api.Client

	onPlan     func(plan string)
	warnedPlan string // the plan onPlan last saw, so it is told once per change

	// failures counts failed calls by kind. The request counter's code label
	// cannot show a 200 whose body was unusable (bad or truncated JSON, over
	// the size cap, too slow): this can.
	failures *prometheus.CounterVec
}

// count records a failed call; 403 and 404 are answers about the address,
// not failures.
func (c *swappableClient) count(endpoint string, err error) {
	kind, ok := api.KindOf(err)
	if err == nil || ok && (kind == api.KindUnverified || kind == api.KindNotMonitored) {
		return
	}
	label := "other"
	if ok {
		label = kind.String()
	}
	c.failures.WithLabelValues(endpoint, label).Inc()
}

var _ scheduler.Client = (*swappableClient)(nil)

// swap installs client and closes the idle connections of the one it
// replaces; a call still in flight on that one closes its connection when it
// returns (release).
func (c *swappableClient) swap(client *api.Client) {
	c.mu.Lock()
	old := c.current
	c.current = client
	c.mu.Unlock()
	if old != nil && old != client {
		old.CloseIdleConnections()
	}
}

// release is called after each call with the client that made it: when a
// reload replaced that client meanwhile, the connection it just returned to
// its pool is closed rather than kept idle.
func (c *swappableClient) release(used *api.Client) {
	if used != c.get() {
		used.CloseIdleConnections()
	}
}

func (c *swappableClient) get() *api.Client {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current
}

func (c *swappableClient) Me(ctx context.Context) (api.Me, api.RateLimit, error) {
	client := c.get()
	me, rl, err := client.Me(ctx)
	c.release(client)
	c.count(api.EndpointMe, err)
	if err == nil {
		c.mu.Lock()
		changed := me.Plan != c.warnedPlan
		c.warnedPlan = me.Plan
		c.mu.Unlock()
		if changed {
			c.onPlan(me.Plan)
		}
	}
	return me, rl, err
}

func (c *swappableClient) Breaches(ctx context.Context, email string) (api.Breaches, api.RateLimit, error) {
	client := c.get()
	b, rl, err := client.Breaches(ctx, email)
	c.release(client)
	c.count(api.EndpointBreaches, err)
	return b, rl, err
}

// tokenSource holds the bearer token and re-reads it after a 401, so a token
// rotated in the token file is picked up without a restart or reload.
type tokenSource struct {
	mu     sync.RWMutex
	token  string
	read   func() (string, error)
	logger log.Logger
}

func (t *tokenSource) get() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.token
}

func (t *tokenSource) reread() {
	token, err := t.read()
	if err != nil {
		level.Error(t.logger).Log("msg", "API answered 401 and the token could not be re-read; keeping the old one", "err", err)
		return
	}
	t.mu.Lock()
	changed := token != t.token
	t.token = token
	t.mu.Unlock()
	if changed {
		level.Info(t.logger).Log("msg", "API answered 401; picked up a new token from the token file")
	} else {
		level.Warn(t.logger).Log("msg", "API answered 401 and the token file still holds the same token: rotate it in the dashboard and update the file")
	}
}
