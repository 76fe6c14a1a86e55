// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// Retry policy. The spec leaves it open; four attempts with doubling waits
// (1s, 2s, 4s) ride out a receiver restart without piling up deliveries.
const (
	deliveryAttempts = 4
	firstRetryDelay  = time.Second
)

// SignatureHeader carries sha256=<hex HMAC-SHA256 of the raw body>.
const SignatureHeader = "X-Service-Signature"

// Sign is the X-Service-Signature of body under secret (spec section 6):
// "sha256=" and the lowercase hex HMAC-SHA256 of the raw body. It is the
// one signer of the project's tests, demo and bench: it lives with the
// simulator because signing is the service's side of the protocol, and
// this package imports nothing of the exporter's but internal/breach, so
// every test can import it without a cycle. The receiver's check
// (webhook/signature.go) is written separately on purpose: a signer and a
// verifier sharing code would agree with each other even if both misread
// the spec.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// delivery is one alert ready to send. The body is encoded once, before
// the first attempt: every retry carries the same bytes, which is what lets
// a receiver recognise and suppress the duplicate.
type delivery struct {
	key       AlertKey
	body      []byte
	signature string
}

// deliverAll sends one account's alerts of a sweep in order, signed with
// secret, in the background. When ctx ends, the alert in hand and the rest
// of the batch are given up.
func (s *Simulator) deliverAll(ctx context.Context, secret []byte, alerts []Alert) {
	batch := make([]delivery, 0, len(alerts))
	for _, a := range alerts {
		body, err := json.Marshal(a)
		if err != nil {
			level.Error(s.logger).Log("msg", "encoding alert", "address", a.Address, "source", a.Source, "err", err)
			continue
		}
		batch = append(batch, delivery{key: a.Key(), body: body, signature: Sign(secret, body)})
	}
	s.pending.add()
	go func() {
		defer s.pending.done()
		for i, d := range batch {
			if ctx.Err() != nil {
				s.countGivenUp(len(batch) - i)
				level.Warn(s.logger).Log("msg", "webhook deliveries abandoned at shutdown", "alerts", len(batch)-i)
				return
			}
			s.deliver(ctx, d)
		}
	}()
}

func (s *Simulator) deliver(ctx context.Context, d delivery) {
	logger := log.With(s.logger, "address", d.key.Address, "source", d.key.Source)
	delay := firstRetryDelay
	for attempt := 1; ; attempt++ {
		err := s.post(ctx, d.body, d.signature)
		s.countAttempt(d.key, err)
		if err == nil {
			return
		}
		if attempt == deliveryAttempts || ctx.Err() != nil {
			s.countGivenUp(1)
			level.Error(logger).Log("msg", "webhook delivery failed, giving up", "attempts", attempt, "err", err)
			return
		}
		level.Warn(logger).Log("msg", "webhook delivery failed, will retry", "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			s.countGivenUp(1)
			level.Warn(logger).Log("msg", "webhook delivery abandoned at shutdown", "attempts", attempt)
			return
		case <-s.clock.After(delay):
		}
		delay *= 2
	}
}

func (s *Simulator) post(ctx context.Context, body []byte, signature string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.webhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, signature)
	resp, err := s.httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Drain a little so the connection can be reused; the body is not used.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// inflight counts background deliveries so Flush can wait for them. Unlike
// sync.WaitGroup it allows new work to start while someone is waiting.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newInflight() *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idle: idle}
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

func (f *inflight) wait(ctx context.Context) {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}
