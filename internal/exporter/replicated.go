// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// With a store, the replicas share one state through one ordered stream of
// events: every change a request or an alert makes is published there
// first, and every replica, the publisher too, applies the stream in its
// order. Applying the same events in the same order to the same start
// gives the same state, so every replica serves the same values and
// counts. A replica that starts takes the newest checkpoint (a state
// snapshot in the store, written by any replica) and the events after it.

// The kinds of events.
const (
	eventAnswered  = "answered"
	eventFailed    = "failed"
	eventDropped   = "dropped"
	eventAccount   = "account"
	eventRateLimit = "rate_limit"
	eventAlert     = "alert"
)

const (
	// startTimeout bounds what a start waits for the store: the
	// checkpoint and the events after it. A store that does not answer
	// leaves the replica to start from its own snapshot and catch up
	// once the store is back.
	startTimeout = 10 * time.Second
	// maxForwardBacklog bounds the alerts accepted while the store is
	// down and not yet passed to it (about 500 bytes each); past it the
	// receiver answers 503 and the service retries later.
	maxForwardBacklog = 100_000
	// The retry after a failed forward, doubled up to its cap.
	forwardRetryMin = 100 * time.Millisecond
	forwardRetryMax = 5 * time.Second
)

// outcomeEvent is the data of every event but an alert's (whose form is
// the journal record's, persist.EncodeAlert).
type outcomeEvent struct {
	Account   string               `json:"account"`
	Key       string               `json:"key,omitempty"`
	Sent      time.Time            `json:"sent,omitzero"`
	At        time.Time            `json:"at,omitzero"`
	State     string               `json:"state,omitempty"`
	Sources   []breach.SourceState `json:"sources,omitempty"`
	Plan      string               `json:"plan,omitempty"`
	Up        bool                 `json:"up,omitempty"`
	RateLimit *breach.RateLimit    `json:"rate_limit,omitempty"`
}

// replicas is the exporter's side of the store: it publishes outcomes
// (scheduler.Outcomes), forwards accepted alerts, applies the stream and
// writes checkpoints.
type replicas struct {
	shared    *sharedstore.Client
	name      string
	logger    log.Logger
	watchlist *watchlist.List
	hook      *webhook.Handler // nil when the receiver is off
	dedupTTL  func() time.Duration

	// applying is held while an event is applied, so that a checkpoint
	// or a snapshot sees the state after a whole event, and the ID of it.
	applying sync.Mutex
	last     string // the last event applied; "" before the first
	// mine are this replica's alerts the store added and the stream has
	// not brought back yet, by event ID: applied from here, not decoded
	// again (applying; at most maxMine).
	mine map[string]watchlist.AcceptedAlert
	// held is what the stream brought for addresses not watched here yet
	// (unwatched.go; applying).
	held held

	// The alerts accepted and durable here, not yet in the store, oldest
	// first. replayed marks those the journal replayed at start: one the
	// store already holds was counted before the restart.
	forwardMu sync.Mutex
	backlog   []forwarded
	wake      chan struct{}
	waiting   prometheus.Gauge
	dropped   prometheus.Counter // events that could not be applied
	published prometheus.Counter // outcomes applied locally only: the store did not take them

	// The publish protocol's (publish.go): the alerts the store
	// confirmed, the identity checked in the store, and whether the
	// shutdown started.
	confirmed  confirmed
	deployment string
	stopping   atomic.Bool
}

type forwarded struct {
	alert    watchlist.AcceptedAlert
	replayed bool
}

// replicaName names this process in the store: the host, the pid and a
// random part, so that a restarted process never takes a dead one's claims
// for its own.
func replicaName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func newReplicas(bundle *config.Bundle, reg prometheus.Registerer, logger log.Logger, w *watchlist.List, cur *config.Current) (*replicas, error) {
	sc := bundle.Config.Store
	r := &replicas{
		name:      replicaName(),
		logger:    logger,
		watchlist: w,
		wake:      make(chan struct{}, 1),
		mine:      map[string]watchlist.AcceptedAlert{},
		held:      newHeld(),
		dedupTTL:  func() time.Duration { return time.Duration(cur.Load().Config.Webhook.DedupWindow) },
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_store_forward_backlog",
			Help: "Alerts accepted by this replica and durable in its journal, not yet passed to the store.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_events_invalid_total",
			Help: "Events from the store that could not be applied (not in a form this version writes).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_publish_failures_total",
			Help: "API outcomes the store did not take: applied on this replica only.",
		}),
	}
	r.confirmed = newConfirmed()
	r.deployment = bundle.StoreDeployment()
	for _, c := range []prometheus.Collector{r.waiting, r.dropped, r.published, r.held.dropped, r.confirmed.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	r.shared, err = sharedstore.Open(sharedstore.Options{
		URL:              sc.URL,
		Servers:          sc.Servers,
		MasterName:       sc.MasterName,
		Username:         sc.Username,
		Password:         bundle.StorePassword,
		SentinelPassword: bundle.StoreSentinelPassword,
		TLS:              bundle.StoreTLS,
		KeyPrefix:        sc.KeyPrefix,
		Replica:          r.name,
		Deployment:       r.deployment,
		Registerer:       reg,
		Logger:           logger,
	})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := r.join(); err != nil {
		r.shared.Close()
		return nil, err
	}
	return r, nil
}

// start picks the state to start from: the store's checkpoint when it is
// newer than the local snapshot (local may be nil), else the local one.
func (r *replicas) start(local *persist.State) *persist.State {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	data, id, ok, err := r.shared.Checkpoint(ctx)
	switch {
	case err != nil:
		level.Warn(r.logger).Log("msg", "The store did not answer at start; starting from this replica's own snapshot and catching up once it is back", "err", err)
	case ok && (local == nil || sharedstore.After(id, local.Stream)):
		st, err := persist.Decode(data)
		if err != nil {
			level.Warn(r.logger).Log("msg", "The store's checkpoint cannot be read; starting from this replica's own snapshot", "err", err)
			break
		}
		st.Stream = id
		if local != nil {
			// The per-replica parts stay this replica's.
			st.Webhook, st.Journal = local.Webhook, local.Journal
		} else {
			st.Webhook, st.Journal = breach.WebhookCounts{}, 0
		}
		level.Info(r.logger).Log("msg", "Starting from the store's checkpoint", "addresses", len(st.Watchlist.Entries))
		return &st
	}
	return local
}

// catchUp applies the events after the start state's, up to the newest,
// before anything serves; a store that does not answer leaves them to
// Follow.
func (r *replicas) catchUp(after string) {
	r.last = after
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	until, err := r.shared.Last(ctx)
	if err != nil {
		return
	}
	n := 0
	if _, err := r.shared.Read(ctx, r.last, until, func(ev sharedstore.Event) { r.apply(ev); n++ }); err != nil {
		level.Warn(r.logger).Log("msg", "Could not read all events after the start state; the rest follow once the store answers", "err", err)
	}
	level.Info(r.logger).Log("msg", "Caught up with the store", "events", n)
}

// run follows the stream and forwards alerts until ctx ends.
func (r *replicas) run(ctx context.Context, wg *sync.WaitGroup) {
	r.applying.Lock()
	after := r.last
	r.applying.Unlock()
	if after == "" {
		after = "0-0"
	}
	context.AfterFunc(ctx, r.stop)
	wg.Add(3)
	go func() { defer wg.Done(); r.shared.Run(ctx) }()
	go func() { defer wg.Done(); r.shared.Follow(ctx, after, r.apply) }()
	go func() { defer wg.Done(); r.forward(ctx) }()
}

// apply applies one event of the stream.
func (r *replicas) apply(ev sharedstore.Event) {
	r.applying.Lock()
	defer r.applying.Unlock()
	if !ev.Rewound && (sharedstore.After(r.last, ev.ID) || r.last == ev.ID) {
		return // already applied (catch-up and Follow may overlap)
	}
	r.last = ev.ID
	if ev.Kind == eventAlert {
		a, ok := r.mine[ev.ID]
		delete(r.mine, ev.ID)
		if !ok || ev.Origin != r.name {
			var err error
			if a, err = persist.DecodeAlert(ev.Data); err != nil {
				r.invalid(ev, err)
				return
			}
		}
		if r.hook != nil && !r.holdAlert(a, ev.Origin == r.name, len(ev.Data)) {
			r.hook.ApplyShared(a, ev.Origin == r.name)
		}
		return
	}
	var o outcomeEvent
	if err := json.Unmarshal(ev.Data, &o); err != nil {
		r.invalid(ev, err)
		return
	}
	if !r.holdAnswer(ev.Kind, o, len(ev.Data)) {
		r.applyOutcome(ev.Kind, o)
	}
}

func (r *replicas) applyOutcome(kind string, o outcomeEvent) {
	w := r.watchlist
	switch kind {
	case eventAnswered:
		w.Attempted(o.Key, o.Sent)
		w.Answered(o.Key, o.State, o.Sources, o.At)
	case eventFailed:
		w.Attempted(o.Key, o.Sent)
		w.Failed(o.Key)
	case eventDropped:
		w.Drop(o.Key)
	case eventAccount:
		w.SetAccount(o.Account, o.Plan, o.Up)
	case eventRateLimit:
		if o.RateLimit != nil {
			w.SetRateLimit(o.Account, *o.RateLimit)
		}
	}
	// An unknown kind is a newer replica's, during a rolling upgrade: it
	// is skipped, and the state it carried comes with the next read.
}

func (r *replicas) invalid(ev sharedstore.Event, err error) {
	r.dropped.Inc()
	level.Warn(r.logger).Log("msg", "Skipped an event from the store that this version cannot apply", "kind", ev.Kind, "id", ev.ID, "err", err)
}

// publish passes an outcome to the store; when the store does not take
// it, this replica applies it alone, so it serves no less than it knows.
func (r *replicas) publish(kind string, o outcomeEvent) {
	data, err := json.Marshal(o)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = r.shared.Publish(ctx, kind, data)
		cancel()
		if err == nil {
			return
		}
	}
	r.published.Inc()
	level.Debug(r.logger).Log("msg", "The store did not take an API outcome; applied on this replica only", "err", err)
	r.applying.Lock()
	r.applyOutcome(kind, o)
	r.applying.Unlock()
}

// The scheduler's Outcomes.

func (r *replicas) Answered(account, key, state string, sources []breach.SourceState, sent, at time.Time) int {
	sch, _ := r.watchlist.ScheduleOf(key)
	r.publish(eventAnswered, outcomeEvent{Account: account, Key: key, Sent: sent, At: at, State: state, Sources: sources})
	return sch.Failures
}

func (r *replicas) Failed(account, key string, sent time.Time) (watchlist.Schedule, bool) {
	sch, ok := r.watchlist.ScheduleOf(key)
	if !ok {
		return sch, false
	}
	r.publish(eventFailed, outcomeEvent{Account: account, Key: key, Sent: sent})
	sch.Failures++
	sch.LastAttempt = sent
	return sch, true
}

func (r *replicas) Drop(account, key string) bool {
	if !r.watchlist.Discovered(key) {
		return false
	}
	r.publish(eventDropped, outcomeEvent{Account: account, Key: key})
	return true
}

func (r *replicas) SetAccount(account, plan string, up bool) {
	r.publish(eventAccount, outcomeEvent{Account: account, Plan: plan, Up: up})
}

func (r *replicas) SetRateLimit(account string, rl breach.RateLimit) {
	r.publish(eventRateLimit, outcomeEvent{Account: account, RateLimit: &rl})
}

// Forwarding alerts.

// queue takes an alert that is durable in this replica's journal (or
// replayed from it) to pass to the store.
func (r *replicas) queue(a watchlist.AcceptedAlert, replayed bool) {
	if replayed && r.replayed(a) {
		return // the store confirmed it before the restart
	}
	r.forwardMu.Lock()
	r.backlog = append(r.backlog, forwarded{alert: a, replayed: replayed})
	r.waiting.Set(float64(len(r.backlog)))
	r.forwardMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// full reports whether the backlog reached its bound: the receiver then
// answers 503 rather than hold more in memory.
func (r *replicas) full() bool {
	r.forwardMu.Lock()
	defer r.forwardMu.Unlock()
	return len(r.backlog) >= maxForwardBacklog
}

// pending reports whether alerts wait to be forwarded: the journal records
// that hold them must stay until they are in the store.
func (r *replicas) pending() bool {
	r.forwardMu.Lock()
	defer r.forwardMu.Unlock()
	return len(r.backlog) > 0
}

// waitingCount is how many accepted alerts wait to be passed to the store.
func (r *replicas) waitingCount() int {
	if r == nil {
		return 0
	}
	r.forwardMu.Lock()
	defer r.forwardMu.Unlock()
	return len(r.backlog)
}

// forwardBatch is the most alerts passed to the store in one round trip;
// forwardLinger is how long the first alert after a quiet moment waits
// for others to go with it.
const (
	forwardBatch  = 1024
	forwardLinger = 5 * time.Millisecond
)

// forward passes the backlog to the store, oldest first and in batches,
// retrying with backoff while the store is down, until ctx ends.
func (r *replicas) forward(ctx context.Context) {
	retry := forwardRetryMin
	var batch []sharedstore.Once
	for {
		r.forwardMu.Lock()
		next := r.backlog[:min(len(r.backlog), forwardBatch)]
		r.forwardMu.Unlock()
		if len(next) == 0 {
			select {
			case <-r.wake:
			case <-ctx.Done():
				return
			}
			// Lingers a moment for more, as the journal's group commit
			// does: under a burst each round trip then carries many
			// alerts, and every replica's read of the stream wakes once
			// for them, which is most of what passing them costs.
			t := time.NewTimer(forwardLinger)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		ids, err := r.publishBatch(ctx, next, &batch)
		if err != nil {
			t := time.NewTimer(retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			retry = min(2*retry, forwardRetryMax)
			continue
		}
		retry = forwardRetryMin
		r.keepMine(next, ids)
		for i, f := range next {
			if r.hook != nil {
				// A replayed alert the store holds was most likely
				// passed by this replica before it stopped, and counted
				// then in counts the snapshot does not hold (it holds
				// them up to the journal's point, and stays unwritten
				// while alerts wait for the store): it is counted
				// accepted again.
				r.hook.Forwarded(ids[i] != "" || f.replayed)
			}
		}
		r.forwardMu.Lock()
		clear(r.backlog[:len(next)])
		r.backlog = r.backlog[len(next):]
		if len(r.backlog) == 0 {
			r.backlog = nil // let the array go after an outage's backlog
		}
		r.waiting.Set(float64(len(r.backlog)))
		r.forwardMu.Unlock()
	}
}

// maxMine bounds mine: an event the stream never brings back (trimmed
// past while this replica was cut off) would otherwise stay.
const maxMine = 10_000

// keepMine keeps the alerts the store added that the stream has not
// brought back yet, so that apply takes them as they are.
func (r *replicas) keepMine(batch []forwarded, ids []string) {
	r.applying.Lock()
	defer r.applying.Unlock()
	for i, id := range ids {
		if id == "" || !sharedstore.After(id, r.last) {
			continue // a duplicate, or applied already (decoded)
		}
		if len(r.mine) >= maxMine {
			clear(r.mine)
		}
		r.mine[id] = batch[i].alert
	}
}

// Checkpoints.

// take calls f with the state after a whole event, and returns the ID of
// that event.
func (r *replicas) take(f func()) string {
	r.applying.Lock()
	defer r.applying.Unlock()
	f()
	r.held.complete = !r.holdingAlerts()
	return r.last
}

// checkpoint writes data, the encoded state after event id, as the
// store's checkpoint unless it holds a later one. It holds this replica's
// snapshot whole: a start takes the shared state from it and keeps its own
// per-replica parts (the receiver's counts, the journal's point).
func (r *replicas) checkpoint(ctx context.Context, data []byte, id string) error {
	if id == "" || !r.held.complete {
		return nil // nothing yet, or a state that lacks the alerts held
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout(startTimeout, closeWriteTimeout))
	defer cancel()
	_, err := r.shared.SaveCheckpoint(ctx, data, id)
	return err
}

// checkpointBehind reports whether the store's checkpoint is missing or
// holds less of the stream than this replica's state: the store restarted
// empty, or the last write failed. A state that did not change is written
// again only then, so that a replica that starts finds it.
func (r *replicas) checkpointBehind() bool {
	if r == nil {
		return false
	}
	r.applying.Lock()
	last := r.last
	r.applying.Unlock()
	if last == "" {
		return false // nothing to checkpoint yet
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout(2*time.Second, closeCheckTimeout))
	defer cancel()
	id, ok, err := r.shared.CheckpointID(ctx)
	return err == nil && (!ok || sharedstore.After(last, id))
}
