// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// LatencyResult is the time from posting a signed alert to the exporter's
// receiver until its /metrics shows the address's new value, in real time,
// with budget to spare.
type LatencyResult struct {
	Addresses         int       `json:"addresses"`
	RequestsPerMinute int       `json:"requests_per_minute"`
	Samples           []float64 `json:"samples_seconds"`
	MedianSeconds     float64   `json:"median_seconds"`
	MaxSeconds        float64   `json:"max_seconds"`
	// FloorSeconds is the median of direct GET /breaches round trips to
	// the simulator: no alert path can refresh a value faster than one read.
	FloorSeconds float64 `json:"floor_seconds"`
}

const (
	latencyBudget = 55 // the default api.requests_per_minute
	// quietBeforeAlert is longer than one request spacing at the budget
	// (60s/55), so the refresh need not wait for the pacing: "budget remains".
	quietBeforeAlert = 1200 * time.Millisecond
	latencyTimeout   = 15 * time.Second
)

// MeasureAlertLatency runs the exporter, watching that many addresses, with its receiver against the
// simulator on loopback. For each sample it waits until the exporter has
// been idle for a request spacing, makes the simulator sweep until an
// address changes, posts that change's signed alert and polls the
// exporter's watchlist until the feed's last_changed gauge holds the
// simulator's new value.
func MeasureAlertLatency(addresses, samples int) (LatencyResult, error) {
	res := LatencyResult{Addresses: addresses, RequestsPerMinute: latencyBudget}
	if addresses < 1 || samples < 1 {
		return res, errors.New("at least one address and one sample")
	}
	creds := newCredentials()
	emails := benchEmails(addresses)
	api, err := newSimulatorAPI(creds, emails, nil)
	if err != nil {
		return res, err
	}
	defer api.stop()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	if res.FloorSeconds, err = readFloor(client, api, creds, emails[0]); err != nil {
		return res, err
	}

	r, err := newExporter(exporterSetup{baseURL: api.baseURL, emails: emails, requestsPerMinute: latencyBudget, webhook: true}, creds)
	if err != nil {
		return res, err
	}
	defer r.close()
	defer r.run()()
	hookURL, stopHook, err := serveLoopback(webhook.NewServer(r.exp.WebhookHandler(), webhookPath))
	if err != nil {
		return res, err
	}
	defer stopHook()

	// The first round reads every address once.
	for _, e := range emails {
		if err := pollUntil(latencyTimeout, func() (bool, error) {
			v, ok, err := sampleValue(r.exp.MetricsHandler(r.reg), "breach_address_state", map[string]string{"address": e, "state": "verified"})
			return ok && v == 1, err
		}); err != nil {
			return res, fmt.Errorf("first read of %s: %w", e, err)
		}
	}

	for range samples {
		if err := waitQuiet(api, quietBeforeAlert); err != nil {
			return res, err
		}
		alert, want, err := nextChange(context.Background(), api.sim)
		if err != nil {
			return res, err
		}
		body, err := json.Marshal(alert)
		if err != nil {
			return res, err
		}
		labels := map[string]string{"address": alert.Address, "source": alert.Source}
		start := time.Now()
		if err := post(client, hookURL+webhookPath, signedAlert{body: body, signature: sim.Sign(creds.secret, body)}); err != nil {
			return res, err
		}
		if err := pollUntil(latencyTimeout, func() (bool, error) {
			v, ok, err := sampleValue(r.exp.MetricsHandler(r.reg), "breach_source_last_changed_timestamp_seconds", labels)
			return ok && v == want, err
		}); err != nil {
			return res, fmt.Errorf("waiting for the refreshed gauge of %s/%s: %w", alert.Address, alert.Source, err)
		}
		res.Samples = append(res.Samples, time.Since(start).Seconds())
	}
	res.MedianSeconds = medianFloat(res.Samples)
	res.MaxSeconds = slices.Max(res.Samples)
	return res, nil
}

// nextChange sweeps until some feed of some address changes and returns
// that change's alert and the new last_changed_at as the gauge shows it.
func nextChange(ctx context.Context, s *sim.Simulator) (sim.Alert, float64, error) {
	for range 1000 {
		alerts := s.Sweep(ctx)
		if len(alerts) == 0 {
			continue
		}
		a := alerts[0]
		b, ok := s.State(a.Address)
		if !ok {
			return a, 0, fmt.Errorf("simulator has no state for %s", a.Address)
		}
		for _, src := range b.Sources {
			if src.Source == a.Source {
				return a, float64(src.LastChangedAt.UnixMilli()) / 1000, nil
			}
		}
		return a, 0, fmt.Errorf("simulator state of %s lacks feed %s", a.Address, a.Source)
	}
	return sim.Alert{}, 0, errors.New("a thousand sweeps changed nothing")
}

// readFloor times direct GET /breaches calls on a warm connection.
func readFloor(client *http.Client, api *simulatorAPI, creds credentials, email string) (float64, error) {
	const reads = 5
	var times []float64
	for i := range reads + 1 {
		req, err := http.NewRequest(http.MethodGet, api.baseURL+"/breaches?email="+url.QueryEscape(email), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+creds.token)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET /breaches answered %d", resp.StatusCode)
		}
		if i > 0 { // the first one opened the connection
			times = append(times, time.Since(start).Seconds())
		}
	}
	return medianFloat(times), nil
}

// pollUntil checks cond every 200µs until it holds, fails or timeout passes.
func pollUntil(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// waitQuiet returns once the simulator has seen no request for quiet.
func waitQuiet(api *simulatorAPI, quiet time.Duration) error {
	last, lastChange := api.requests(), time.Now()
	return pollUntil(latencyTimeout, func() (bool, error) {
		if n := api.requests(); n != last {
			last, lastChange = n, time.Now()
		}
		return time.Since(lastChange) >= quiet, nil
	})
}
