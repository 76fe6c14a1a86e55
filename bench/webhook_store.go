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
// without, in rounds whose slices alternate (interleavedRound).
type WebhookStoreResult struct {
	Clients  int `json:"clients"`
	Requests int `json:"requests_per_round"`
	Rounds   int `json:"rounds"`
	// Accepted (answered 204) per second: the median round.
	StorePerSecond float64   `json:"store_per_second"`
	AlonePerSecond float64   `json:"alone_per_second"`
	StoreRounds    []float64 `json:"store_rounds_per_second"`
	AloneRounds    []float64 `json:"alone_rounds_per_second"`
	// The rate of every slice of every round (interleavedRound), in the
	// order sent. Ratio is the median over slices of the ratio of each
	// store slice to the same slice without the store.
	StoreSlices []float64 `json:"store_slices_per_second"`
	AloneSlices []float64 `json:"alone_slices_per_second"`
	// Ratio: see StoreSlices.
	Ratio float64 `json:"ratio"`
	// ForwardedPerSecond is, per store round, the timed alerts over the
	// time from the start of each slice until the store held them all and
	// the exporter had applied them from the stream: the rate at which
	// alerts reach the shared state, not the 204s. The median round.
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
	// CPU time (user+system) per timed alert, over the slices, each from
	// its first send until its alerts were counted: this process (senders
	// and exporters) and, with the store, redis-server too. Other load on
	// the machine disturbs it less than the rates. The mean over rounds.
	StoreCPUMicros float64 `json:"store_cpu_us_per_alert"`
	AloneCPUMicros float64 `json:"alone_cpu_us_per_alert"`
}

// MeasureWebhookStore runs the rounds.
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

	for range o.Rounds {
		if err := storeRound(&res, w, redis, 1/float64(o.Rounds)); err != nil {
			return res, err
		}
	}
	res.StorePerSecond, res.AlonePerSecond = medianFloat(res.StoreRounds), medianFloat(res.AloneRounds)
	res.ForwardedPerSecond = medianFloat(res.ForwardedRounds)
	res.Ratio = medianRatio(res.StoreSlices, res.AloneSlices)
	return res, nil
}

// storeRound runs one round: the exporter with the store and the one
// without at once, their slices interleaved (interleavedRound), the store's
// slices each waiting until the store held every alert and the exporter
// applied them from its stream, so that none of that work runs into the
// other's slice. It adds the round's figures to res, the CPU figures
// weighing share.
func storeRound(res *WebhookStoreResult, w *webhookRounds, redis *redisServer, share float64) error {
	var targets [2]webhookTarget // the store's, then the one alone
	defer func() {
		for _, t := range targets {
			if t.stop != nil {
				t.stop()
			}
		}
	}()
	var sliced [2]*slicedTarget
	for i := range targets {
		setup := webhookSetup(w.api.baseURL, w.emails)
		if i == 0 {
			// A prefix of its own: every round starts from an empty
			// store.
			setup.storeURL, setup.storePrefix = redis.url(), "bench-"+randomHex(4)
		}
		var err error
		if targets[i], err = startOurReceiver(setup, w.creds); err != nil {
			return fmt.Errorf("exporter, store %v: %w", i == 0, err)
		}
		sliced[i] = newSlicedTarget(targets[i].url, w.clients)
		defer sliced[i].close()
	}
	store := targets[0]
	sliced[0].settle = func(sent int) error { return storeCounted(store, sent) }
	sliced[0].otherCPU = func() (time.Duration, error) { return processCPU(redis.cmd.Process.Pid) }
	results, err := interleavedRound(sliced[:], w.warm, w.timed, w.clients)
	if err != nil {
		return err
	}
	// Without a store the 204 comes after the count.
	if accepted, err := targets[1].counted(); err != nil || accepted != w.sent() {
		return fmt.Errorf("exporter alone: %d alerts sent, %d counted accepted (%v)", w.sent(), accepted, err)
	}
	res.Sent += w.sent()
	res.Accepted += w.sent() // storeCounted checked both counts
	res.Counted += w.sent()
	res.StoreRounds = append(res.StoreRounds, results[0].rate)
	res.AloneRounds = append(res.AloneRounds, results[1].rate)
	res.StoreSlices = append(res.StoreSlices, results[0].sliceRates...)
	res.AloneSlices = append(res.AloneSlices, results[1].sliceRates...)
	res.ForwardedRounds = append(res.ForwardedRounds, float64(len(w.timed))/results[0].settled.Seconds())
	res.StoreCPUMicros += results[0].cpuMicros * share
	res.AloneCPUMicros += results[1].cpuMicros * share
	return nil
}

// storeCounted polls the exporter until every alert it answered 204 (sent
// so far) is in the store and counted from its stream. More than were
// sent, or not all within the deadline, is an error: the figure would be
// of the wrong thing.
func storeCounted(target webhookTarget, sent int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		exp := target.exposition()
		accepted := int(sumSamples(exp, "breach_webhook_requests_total", `outcome="accepted"`))
		counted := int(sumSamples(exp, "breach_alerts_total", ""))
		if accepted > sent || counted > sent {
			return fmt.Errorf("%d alerts sent, %d counted accepted and %d in breach_alerts_total", sent, accepted, counted)
		}
		if accepted == sent && counted == sent {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 2 minutes, of %d alerts sent %d were counted accepted and %d in breach_alerts_total (store forward backlog %v)",
				sent, accepted, counted, sumSamples(exp, "breach_exporter_store_forward_backlog", ""))
		}
		time.Sleep(5 * time.Millisecond) // polling interval, with the deadline above
	}
}
