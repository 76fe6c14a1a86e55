// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"time"
)

// Webhook intake with the store against one replica's durable intake: the
// same exporter, senders and alerts as MeasureWebhook's, once with its
// state folder and no store, once with a store as well (a real
// redis-server on loopback). In store mode a 204 still waits for the
// local journal's sync; the alert goes on to the store afterwards, so the
// store's count is checked once every alert has reached it.

// goalWebhookStoreRatio is the store's intake against one replica's
// durable intake.
const goalWebhookStoreRatio = 0.8

// WebhookStoreResult is accepted alerts per second, with the store and
// without, in alternating rounds.
type WebhookStoreResult struct {
	Clients  int `json:"clients"`
	Requests int `json:"requests_per_round"`
	Rounds   int `json:"rounds"`
	// Accepted (answered 204) per second: the median round.
	StorePerSecond float64   `json:"store_per_second"`
	AlonePerSecond float64   `json:"alone_per_second"`
	StoreRounds    []float64 `json:"store_rounds_per_second"`
	AloneRounds    []float64 `json:"alone_rounds_per_second"`
	// Ratio is the median over rounds of store/alone.
	Ratio float64 `json:"ratio"`
	// ForwardedPerSecond is, per store round, every alert sent (warm-up
	// included) over the time from the first send until the store held
	// them all and the exporter had applied them from the stream: the
	// rate at which alerts reach the shared state, not the 204s. The
	// median round.
	ForwardedPerSecond float64   `json:"forwarded_per_second"`
	ForwardedRounds    []float64 `json:"forwarded_rounds_per_second"`
	// Sent is every alert sent with the store; Accepted what
	// breach_webhook_requests_total{outcome="accepted"} counted once the
	// store held them (in store mode an alert is counted accepted when
	// the store took it), Counted the sum of breach_alerts_total applied
	// from the store's stream. All three must be equal.
	Sent     int `json:"sent"`
	Accepted int `json:"accepted"`
	Counted  int `json:"counted"`
	// CPU time (user+system) per alert, warm-up included, from the first
	// send until the round's alerts were counted: this process (senders
	// and exporter) and, with the store, redis-server too. Other load on
	// the machine disturbs it less than the rates. The mean over rounds.
	StoreCPUMicros float64 `json:"store_cpu_us_per_alert"`
	AloneCPUMicros float64 `json:"alone_cpu_us_per_alert"`
}

// MeasureWebhookStore runs the rounds, alternating which goes first.
func MeasureWebhookStore(o WebhookOptions) (WebhookStoreResult, error) {
	res := WebhookStoreResult{Clients: o.Clients, Requests: o.Requests, Rounds: o.Rounds}
	if o.Clients < 1 || o.Requests < 1 || o.Rounds < 1 || o.Addresses < 1 {
		return res, errors.New("every webhook option must be at least 1")
	}
	redis, err := startRedis()
	if err != nil {
		return res, err
	}
	defer redis.stop()
	w, err := newWebhookRounds(o.Clients, o.Requests, o.Addresses)
	if err != nil {
		return res, err
	}
	defer w.stop()

	err = eachRound(o.Rounds, 2, func(variant int) error {
		withStore := variant == 0
		setup := webhookSetup(w.api.baseURL, w.emails)
		if withStore {
			// A prefix of its own: every round starts from an empty
			// store.
			setup.storeURL, setup.storePrefix = redis.url(), "bench-"+randomHex(4)
		}
		target, err := startOurReceiver(setup, w.creds)
		if err != nil {
			return err
		}
		r, cpu, err := storeRound(&res, w, target, redis, withStore)
		target.stop()
		if err != nil {
			return fmt.Errorf("exporter, store %v: %w", withStore, err)
		}
		perAlert := float64(cpu.Microseconds()) / float64(w.sent()) / float64(o.Rounds)
		if withStore {
			res.StoreRounds = append(res.StoreRounds, r.rate)
			res.StoreCPUMicros += perAlert
		} else {
			res.AloneRounds = append(res.AloneRounds, r.rate)
			res.AloneCPUMicros += perAlert
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.StorePerSecond, res.AlonePerSecond = medianFloat(res.StoreRounds), medianFloat(res.AloneRounds)
	res.ForwardedPerSecond = medianFloat(res.ForwardedRounds)
	res.Ratio = medianRatio(res.StoreRounds, res.AloneRounds)
	return res, nil
}

// storeRound times one round against target and waits until it counted
// every alert: with the store, until the store holds them and the exporter
// applied them from its stream. cpu is the CPU time spent from the first
// send until then, redis-server's included with the store.
func storeRound(res *WebhookStoreResult, w *webhookRounds, target webhookTarget, redis *redisServer, withStore bool) (r roundResult, cpu time.Duration, err error) {
	began, cpu0 := time.Now(), cpuTime()
	var redis0 time.Duration
	if withStore {
		redis0, err = processCPU(redis.cmd.Process.Pid)
	}
	if err == nil {
		r, err = timedRound(target.url, w.warm, w.timed, w.clients)
	}
	if err == nil && withStore {
		err = waitStoreCounted(res, target, w.sent(), began)
	} else if err == nil {
		// Without a store the 204 comes after the count.
		var accepted int
		if accepted, err = target.counted(); err == nil && accepted != w.sent() {
			err = fmt.Errorf("%d alerts sent, %d counted accepted", w.sent(), accepted)
		}
	}
	cpu = cpuTime() - cpu0
	if err == nil && withStore {
		var redis1 time.Duration
		redis1, err = processCPU(redis.cmd.Process.Pid)
		cpu += redis1 - redis0
	}
	return r, cpu, err
}

// waitStoreCounted polls the exporter until every alert it answered 204
// is in the store and counted from its stream, then adds the round's
// counts to res. More than were sent, or not all within the deadline, is
// an error: the figure would be of the wrong thing.
func waitStoreCounted(res *WebhookStoreResult, target webhookTarget, sent int, began time.Time) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		exp := target.exposition()
		accepted := int(sumSamples(exp, "breach_webhook_requests_total", `outcome="accepted"`))
		counted := int(sumSamples(exp, "breach_alerts_total", ""))
		if accepted > sent || counted > sent {
			return fmt.Errorf("%d alerts sent, %d counted accepted and %d in breach_alerts_total", sent, accepted, counted)
		}
		if accepted == sent && counted == sent {
			res.ForwardedRounds = append(res.ForwardedRounds, float64(sent)/time.Since(began).Seconds())
			res.Sent += sent
			res.Accepted += accepted
			res.Counted += counted
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 2 minutes, of %d alerts sent %d were counted accepted and %d in breach_alerts_total (store forward backlog %v)",
				sent, accepted, counted, sumSamples(exp, "breach_exporter_store_forward_backlog", ""))
		}
		time.Sleep(5 * time.Millisecond) // polling interval, with the deadline above
	}
}
