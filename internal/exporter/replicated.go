// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
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
	// mine are this replica's alerts the store added and this replica
	// has not applied yet: applied from here, not decoded again, and from
	// here too when the store lost them (mine.go; applying).
	mine    mineSet
	applied appliedDigests // applied.go
	own     ownAlerts      // reforward.go
	// logs paces the lines of store failures that repeat, per reason.
	logs *ratelog.Limiter
	// held is what the stream brought for addresses not watched here yet
	// (unwatched.go; applying).
	held held

	// The alerts accepted and durable here, not yet in the store, oldest
	// first.
	forwardMu sync.Mutex
	backlog   []forwarded
	wake      chan struct{}
	waiting   prometheus.Gauge
	dropped   prometheus.Counter // events and checkpoints that could not be applied
	published prometheus.Counter // outcomes the store did not take: applied nowhere

	// The publish protocol's (publish.go): the alerts the store
	// confirmed and the identity checked in the store.
	confirmed  confirmed
	deployment string

	sync    convergence // converge.go
	dups    dupAccount  // replayed.go
	page    pageShare   // pageshare.go
	serving *serving    // serving.go
}

type forwarded struct {
	alert watchlist.AcceptedAlert
	// again: passed again because a state loaded in place of this
	// replica's lacks it (reforward.go); its 204 was counted when it was
	// first passed.
	again bool
}

// replicaName names this process in the store: the host, the pid, the
// state folder's mark (folderMark) and a random part, so that a restarted
// process never takes a dead one's claims for its own, and yet knows the
// alerts an earlier process on its folder added to the stream.
func replicaName(folder string) string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s:%s", host, os.Getpid(), folderMark(host, folder), hex.EncodeToString(b[:]))
}

// folderMark is the same for every process on one state folder: the host
// and the folder's absolute path (a pod's name and its emptyDir's mount,
// kept through a container's restart). A folder moved to another host or
// path gets another mark: its replayed alerts then count as duplicates,
// never twice as accepted.
func folderMark(host, folder string) string {
	if abs, err := filepath.Abs(folder); err == nil {
		folder = abs
	}
	sum := sha256.Sum256([]byte(host + "\x00" + folder))
	return hex.EncodeToString(sum[:6])
}

// markOf is the folder mark in a replica's name; "" in a name of the
// release before marks, which had three parts.
func markOf(name string) string {
	parts := strings.Split(name, ":")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

func newReplicas(bundle *config.Bundle, folder string, reg prometheus.Registerer, logger log.Logger, w *watchlist.List, cur *config.Current) (*replicas, error) {
	sc := bundle.Config.Store
	r := &replicas{
		name:      replicaName(folder),
		logger:    logger,
		watchlist: w,
		wake:      make(chan struct{}, 1),
		mine:      newMineSet(),
		logs:      ratelog.New(time.Minute, nil),
		held:      newHeld(),
		dedupTTL:  func() time.Duration { return time.Duration(cur.Load().Config.Webhook.DedupWindow) },
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_store_forward_backlog",
			Help: "Alerts accepted by this replica and durable in its journal, not yet passed to the store.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_events_invalid_total",
			Help: "Events and checkpoints from the store skipped: over their size bound, not in a form this version reads, or failing its checks (an unknown kind or a later version included).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_publish_failures_total",
			Help: "API outcomes the store did not take: applied on no replica, so that all stay alike; the address is read again.",
		}),
	}
	r.confirmed = newConfirmed()
	r.page = newPageShare()
	r.deployment = bundle.StoreDeployment()
	r.sync.init()
	for _, c := range append([]prometheus.Collector{r.waiting, r.dropped, r.published, r.held.dropped, r.held.overflow, r.confirmed.dropped}, r.sync.collectors()...) {
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
		Keys:             storeKeys(bundle),
		AcceptUnsigned:   sc.AcceptUnsigned,
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

// apply applies one event of the stream, checked first like an API
// answer: one that fails is skipped and counted, and the state stays.
func (r *replicas) apply(ev sharedstore.Event) {
	r.applying.Lock()
	defer r.applying.Unlock()
	if !ev.Rewound && (sharedstore.After(r.last, ev.ID) || r.last == ev.ID) {
		return // already applied (catch-up and Follow may overlap)
	}
	r.applyLostBefore(ev.ID)
	r.noteLost(ev)
	prev := r.last // the event before; none known when the stream went back
	if ev.Rewound {
		prev = ""
	}
	r.last = ev.ID
	if size := max(ev.Oversized, int64(len(ev.Data))); size > maxEventBytes {
		// Before anything decodes it: the bound is on what is held. An
		// entry over it in the store was not even sent (Oversized).
		r.invalid(ev, fmt.Errorf("%d bytes, more than the %d an event may have", size, maxEventBytes))
		return
	}
	now := time.Now()
	switch ev.Kind {
	case eventAlert:
		r.applyAlert(ev, prev, now)
		return
	case eventPage:
		r.applyPage(ev, now)
		return
	}
	if !knownOutcome(ev.Kind) {
		// A later release's, during a rolling upgrade: the state it
		// carried comes with the next checkpoint or read.
		r.invalid(ev, errors.New("an unknown kind"))
		return
	}
	if d, ok := outcomeDigest(ev.Kind, ev.Data); ok && !r.applied.add(d, ev.ID) {
		// An older answer again would take the address back, and its
		// next read would count the same news twice.
		r.copied(ev)
		return
	}
	o, err := decodeOutcome(ev.Kind, ev.Data, now)
	if err != nil {
		r.invalid(ev, err)
		return
	}
	if !r.holdAnswer(ev.Kind, o, len(ev.Data)) {
		r.applyOutcome(ev.Kind, o)
	}
}

// applyAlert applies an accepted alert's event, prev the event before it.
// Called with applying held.
func (r *replicas) applyAlert(ev sharedstore.Event, prev string, now time.Time) {
	a, ok := r.mine.take(ev.ID)
	if !ok && ev.Origin == r.name && len(r.mine.applied) < maxMine {
		r.mine.applied[ev.ID] = true // before its publish returned: keepMine
	}
	if !ok || ev.Origin != r.name {
		var err error
		if a, err = decodeAlert(ev.Data, now); err != nil {
			r.invalid(ev, err)
			return
		}
	}
	if !r.applied.add(a.Digest, ev.ID) {
		r.copied(ev)
		return
	}
	r.inspect(ev, a.Digest)
	if r.hook != nil && !r.holdAlert(a, ev.Origin == r.name, ev.ID, prev, len(ev.Data)) {
		r.hook.ApplyShared(a, ev.Origin == r.name)
	}
}

// noteLost notes, for the next round, an entry the store added after it
// had lost this replica's position: its prev (the newest ID the stream
// had given before it) comes before the last event applied. Trimming
// never does that; a store restarted from an older save, or a stream
// deleted, does, however many entries followed before a round looked at
// the store's head. Entries the reader did not apply (another
// deployment's, or far ahead and removed by the repair) leave the
// position where it was, and so raise nothing; an entry of the release
// before prev has none. Called with applying held.
func (r *replicas) noteLost(ev sharedstore.Event) {
	if ev.Prev != "" && r.sync.lost == "" && sharedstore.Before(ev.Prev, r.last) {
		r.sync.lost, r.sync.lostAt = r.last, ev.ID
	}
}

func knownOutcome(kind string) bool {
	switch kind {
	case eventAnswered, eventFailed, eventDropped, eventAccount, eventRateLimit:
		return true
	}
	return false
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
		w.SetRateLimit(o.Account, *o.RateLimit)
	}
}

func (r *replicas) invalid(ev sharedstore.Event, err error) {
	r.dropped.Inc()
	level.Warn(r.logger).Log("msg", "Skipped an event from the store that this version cannot apply", "kind", breach.LabelValue(ev.Kind, breach.MaxValueBytes), "id", breach.LabelValue(ev.ID, breach.MaxValueBytes), "err", err)
}

// publish passes an outcome to the store. One the store does not take is
// applied nowhere, this replica included: a state only one replica holds
// is not the cluster's, and no checkpoint may carry it. The address stays
// due and is read again; an outcome the store took though its answer was
// lost comes back with the stream.
func (r *replicas) publish(kind string, o outcomeEvent) {
	data, err := encodeOutcome(o)
	if err == nil {
		// Not Run's context: an outcome that came before the stop is
		// still published, within the stop's bound on the store.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = r.shared.Publish(ctx, kind, data)
		cancel()
		if err == nil {
			return
		}
	}
	r.published.Inc()
	level.Debug(r.logger).Log("msg", "The store did not take an API outcome; no replica applies it, and the address is read again", "err", err)
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
	if replayed {
		r.dups.replayed = true // before anything runs: set at start only
		if r.replayed(a) {
			// The store confirmed it to this folder before the restart:
			// it is not passed again, and its count, which no snapshot
			// holds, is counted again here.
			r.counted("=", a.Digest)
			return
		}
	}
	r.push(forwarded{alert: a})
}

// push adds to the backlog and wakes forward.
func (r *replicas) push(fs ...forwarded) {
	r.forwardMu.Lock()
	r.backlog = append(r.backlog, fs...)
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
// forwardLinger is how long a batch that is not full waits for others to
// go with it while they keep coming, forwardQuiet the gap that ends the
// wait at once (linger). A batch costs the store a script call, every
// replica a read of the stream and this one a sync of its confirmed file,
// whatever its size: at 15,000 alerts a second 50 ms makes batches of
// about 750 (bench/README.md measured 5, 20 and 50 ms), and an alert
// reaches the other replicas 50 ms later at most, which no page notices.
const (
	forwardBatch  = 1024
	forwardLinger = 50 * time.Millisecond
	forwardQuiet  = 5 * time.Millisecond
)

// linger waits for more alerts to go with those waiting, as the journal's
// group commit does, also between the batches of a steady flow (the 204s
// do not wait for the store): until the batch is full, forwardLinger
// passed, or none came for forwardQuiet. False when ctx ended.
func (r *replicas) linger(ctx context.Context) bool {
	deadline := time.Now().Add(forwardLinger)
	for n := r.waitingCount(); n < forwardBatch; {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		if !pause(ctx, min(forwardQuiet, left)) {
			return false
		}
		m := r.waitingCount()
		if m == n {
			return true // the flow stopped: nothing more to wait for
		}
		n = m
	}
	return true
}

// forward passes the backlog to the store, oldest first and in batches,
// retrying with backoff while the store is down, until ctx ends.
func (r *replicas) forward(ctx context.Context) {
	retry := forwardRetryMin
	var batch []sharedstore.Once
	for {
		if r.waitingCount() == 0 {
			select {
			case <-r.wake:
			case <-ctx.Done():
				return
			}
		}
		// Each round trip then carries many alerts, and every replica's
		// read of the stream, the store's script and the confirmed file's
		// sync are paid once for them, which is most of what passing them
		// costs.
		if !r.linger(ctx) {
			return
		}
		r.forwardMu.Lock()
		next := r.backlog[:min(len(r.backlog), forwardBatch)]
		r.forwardMu.Unlock()
		if len(next) == 0 {
			continue // a wake-up left from a batch already passed
		}
		epoch := r.mineEpoch()
		ids, err := r.publishBatch(ctx, next, &batch, epoch)
		if err != nil {
			if !pause(ctx, retry) {
				return
			}
			retry = min(2*retry, forwardRetryMax)
			continue
		}
		retry = forwardRetryMin
		for i, f := range next {
			if !f.again {
				r.counted(ids[i], f.alert.Digest)
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

// storeKeys is the bundle's signing key set in the store client's form.
func storeKeys(b *config.Bundle) sharedstore.Keys {
	sign, verify := b.StoreKeys()
	return sharedstore.Keys{Sign: sign, Verify: verify}
}
