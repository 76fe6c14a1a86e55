// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Convergence: a replica serves and checkpoints the cluster's state only
// once it can prove it holds it, whatever the order of starts, stops and
// store outages.
//
// The proof is a lineage. Every checkpoint names the lineage it belongs to
// (a random token in the checkpoint's hash; "" for a checkpoint of the
// release before lineages) and the stream ID it holds. A replica's state
// descends from a lineage when it loaded that lineage's checkpoint, or
// started it; it is synced when, besides, it read every event after that
// checkpoint up to the store's newest (the stream shows no entry deleted
// or trimmed past it). Only a synced replica writes a checkpoint, and only
// over one of its own lineage that holds less (or over one that cannot be
// valid: an ID past the store's clock; or, a lineage's first, as below).
// So a checkpoint always holds a whole history, and a replica that loads
// it and reads on holds it too.
//
// Every second (convergeEvery) a replica looks at the store's head (the
// checkpoint's ID and lineage, the stream's bounds, without any data) and
//   - without a valid checkpoint (the store restarted empty, or it holds a
//     forged one): a synced replica writes its own at once; one that is
//     not waits while a synced replica says it is alive
//     (MarkSynced), else, after syncedTTL, starts a new lineage from what
//     it holds: nothing better is left anywhere (a fresh deployment, or a
//     store that lost everything while no replica held the history);
//   - with a checkpoint of another lineage, or when its state descends
//     from none (a start while the store did not answer): it loads the
//     checkpoint, replaces its state with it and reads on from there;
//   - with a gap after its position (events trimmed or deleted that it
//     did not read): it is no longer synced, and loads the checkpoint once
//     one lies past the gap;
//   - when the store lost events it holds (restarted from an older RDB,
//     the stream deleted) and the store's checkpoint is older than them:
//     it starts a new lineage from its own state, so that replicas that
//     loaded the older checkpoint meanwhile resync with it. It sees the
//     loss in the store's head when the stream ends before its position,
//     and in the stream itself when new entries followed the loss before
//     the round: each entry names the newest ID the stream had given
//     before it (prev), and one applied after a position past its prev
//     says the store no longer has that position (noteLost). Several
//     replicas that start new lineages at once settle on the one holding
//     the latest position: the first checkpoint of a new lineage replaces
//     another lineage's only when that one holds an earlier event
//     (sharedstore's writeCheckpointScript), and the others load it.
//
// Why a lineage rather than a digest of the state compared every so often:
// a digest says two replicas differ, not which one is right, and it needs
// every replica's state encoded alike at the same event; the lineage says
// which checkpoint a state descends from and is checked with one small
// read. Why not one writer: the store would need an election and a lease,
// and the writer's loss would stop every checkpoint until a new one is
// chosen; with lineages any synced replica may write, and writes of one
// lineage are ordered by the stream ID they hold.

const (
	// convergeEvery is how often a replica looks at the store's head.
	convergeEvery = time.Second
	// syncedTTL is how long a synced replica's word lasts: three rounds.
	syncedTTL = 3 * convergeEvery
)

// convergence is the replica's side of the lineage.
type convergence struct {
	// Under replicas.applying.
	lineage  string           // the lineage the state descends from
	descends bool             // false until a checkpoint was loaded or a lineage started
	replace  string           // an invalid checkpoint's ID, to write over
	extra    *checkpointExtra // the continuity taken with the state (take), for its checkpoint
	start    *checkpointExtra
	// fresh: the lineage was started here and no checkpoint of it is
	// written yet; its first is sharedstore.Checkpoint.New, and may
	// replace one of from, the lineage the state descended from then.
	fresh bool
	from  string
	// started is the position this replica started its lineage from; ""
	// when it loaded the lineage's checkpoint.
	started string
	// lost is the position held when an entry applied named a prev
	// before it (noteLost): the store lost events this replica holds,
	// whatever entries came after; lostAt is that entry's ID. "" when
	// none; the next round acts on it.
	lost, lostAt string

	synced atomic.Bool

	// The converge goroutine's own.
	target       string    // the newest event the last round saw
	noCheckpoint time.Time // since when the store has no valid checkpoint
	counted      string    // the invalid checkpoint ID counted already
	follow       followRun
	behind       atomic.Bool // the store's checkpoint holds less than this synced replica
	urgent       bool        // ... or is missing, invalid or of an older lineage: written at once
	retry        retryWrite  // when writeNow tries again after the store refused

	// resynced syncs the watchlist with the config after a resync
	// replaced it.
	resynced func()

	gauge    prometheus.Gauge
	resyncs  *prometheus.CounterVec
	lineages *prometheus.CounterVec
}

type followRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *convergence) init() {
	c.gauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "breach_exporter_store_synced",
		Help: "1 when this replica proved it holds the cluster's history (a checkpoint of the store's lineage and every event after it), else 0: it then writes no checkpoint and reports not ready.",
	})
	c.resyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_exporter_store_resyncs_total",
		Help: "Times this replica replaced its state with the store's checkpoint, by reason: lineage (its state did not descend from the store's checkpoint), gap (events after its position were trimmed or deleted).",
	}, []string{"reason"})
	c.lineages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_exporter_store_lineages_started_total",
		Help: "Times this replica started a new lineage of checkpoints from its own state, by reason: empty (no replica held a history), rewound (the store lost events this replica holds).",
	}, []string{"reason"})
	for _, r := range []string{"lineage", "gap"} {
		c.resyncs.WithLabelValues(r)
	}
	for _, r := range []string{"empty", "rewound"} {
		c.lineages.WithLabelValues(r)
	}
}

func (c *convergence) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.gauge, c.resyncs, c.lineages}
}

// StoreSynced reports whether this replica proved it holds the cluster's
// history; always true without a store. The readiness endpoint reads it:
// a replica that is not synced should get no traffic meant for the
// cluster.
func (e *Exporter) StoreSynced() bool {
	return e.replicas == nil || e.replicas.sync.synced.Load()
}

// errNotSynced is Ready's answer while a replica catches up.
var errNotSynced = errors.New("not in sync with the shared store yet: loading its checkpoint and the events after it")

// Ready is the exporter's condition of /-/ready: a replica that reaches
// the store but has not proved it holds the cluster's history is not
// ready, so that a load balancer sends it no scrape or webhook before it
// serves the whole state. While the store does not answer, a replica is
// ready whether synced or not: it takes webhooks into its journal (204
// never depended on the store), and a rollout during a store outage must
// not leave the webhook URL without a listener; breach_exporter_store_synced
// says 0 meanwhile.
func (e *Exporter) Ready() error {
	if e.StoreSynced() || !e.replicas.shared.Up() {
		return nil
	}
	return errNotSynced
}

// resyncWatchlist is the replicas' resynced: the watchlist, just replaced
// by a checkpoint, watches what the config says again.
func (e *Exporter) resyncWatchlist() {
	e.syncing.Lock()
	defer e.syncing.Unlock()
	e.refreshPage() // first: the checkpoint's moments of its acknowledgements stay
	e.syncWatchlist(e.config.Load())
}

func (r *replicas) setSynced(synced bool) {
	r.sync.synced.Store(synced)
	if synced {
		r.sync.gauge.Set(1)
	} else {
		r.sync.gauge.Set(0)
	}
}

// start picks the state to start from: the store's valid checkpoint, with
// this replica's own per-replica parts of local (which may be nil); local
// when the store has none or does not answer. Then the replica is not
// synced: its rounds say when it is.
func (r *replicas) start(local *persist.State) *persist.State {
	if local != nil {
		r.dups.since = local.Stream
		if local.SignedOnly {
			r.shared.Latch()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	r.applied.restoreLocal(local, time.Now())
	head, err := r.shared.Head(ctx)
	if err != nil {
		level.Warn(r.logger).Log("msg", "The store did not answer at start; serving this replica's own snapshot, not synced until the store's checkpoint and the events after it are loaded", "err", err)
		return local
	}
	st, x, lineage, ok := r.loadCheckpoint(ctx, head)
	if !ok {
		return local
	}
	// The per-replica parts stay this replica's: the receiver's counts
	// and the journal's point are never another replica's.
	st.Webhook, st.Journal = breach.WebhookCounts{}, 0
	if local != nil {
		st.Webhook, st.Journal = local.Webhook, local.Journal
	}
	r.applying.Lock()
	r.applied.restore(x.appliedWire(), st.Stream, time.Now())
	r.sync.lineage, r.sync.descends, r.sync.start = lineage, true, x
	r.held.loaded = st.Watchlist.Entries
	r.applying.Unlock()
	level.Info(r.logger).Log("msg", "Starting from the store's checkpoint", "addresses", len(st.Watchlist.Entries), "stream", st.Stream)
	return &st
}

// loadCheckpoint fetches the store's checkpoint, bounded before it is
// fetched, and decodes and checks it; one that fails is counted once and
// not loaded. A load that another replica's write interrupts starts again.
func (r *replicas) loadCheckpoint(ctx context.Context, head sharedstore.Head) (persist.State, *checkpointExtra, string, bool) {
	if !head.HasCheckpoint || !r.validHead(head) {
		return persist.State{}, nil, "", false
	}
	for range checkpointLoadTries {
		c, st, news, err := r.fetchCheckpoint(ctx, head.Now)
		if errors.Is(err, sharedstore.ErrCheckpointMoved) {
			continue
		}
		var invalid invalidParts
		switch {
		case errors.As(err, &invalid):
			r.invalidCheckpoint(c.ID, err)
		case errors.Is(err, sharedstore.ErrUnverifiedCheckpoint):
			r.replaceCheckpoint(c.ID) // counted by the store's client
		}
		if err != nil {
			return persist.State{}, nil, "", false
		}
		st.Stream = c.ID
		if st.SignedOnly && c.Signed {
			r.shared.Latch()
		}
		var extra *checkpointExtra
		if x, ok := decodeExtra(c.Extra, c.ID); ok {
			extra = &x
		}
		if len(news) > 0 {
			extra = cmp.Or(extra, &checkpointExtra{V: eventFormat, ID: c.ID})
			extra.News = append(extra.News, news...)
		}
		return st, extra, c.Lineage, true
	}
	return persist.State{}, nil, "", false
}

// fetchCheckpoint reads the checkpoint, whole or in parts (with the news
// its parts hold); an error that says it cannot be valid is an
// invalidParts.
func (r *replicas) fetchCheckpoint(ctx context.Context, now time.Time) (sharedstore.Checkpoint, persist.State, []addressExtra, error) {
	c, ok, err := r.shared.LoadCheckpoint(ctx, maxCheckpointBytes)
	switch {
	case errors.Is(err, sharedstore.ErrCheckpointTooLarge):
		return c, persist.State{}, nil, invalidParts{err}
	case err != nil:
		return c, persist.State{}, nil, err
	case !ok:
		return c, persist.State{}, nil, errors.New("no checkpoint")
	case !validCheckpointID(c.ID, now):
		return c, persist.State{}, nil, invalidParts{errors.New("its ID is past the store's clock")}
	case c.Parts != nil:
		st, news, err := r.loadParts(ctx, c)
		return c, st, news, err
	}
	st, err := persist.DecodeShared(c.Data)
	if err != nil {
		err = invalidParts{err}
	}
	return c, st, nil, err
}

// validHead reports whether the checkpoint the head shows could be
// loaded: this deployment's, within its size bound and with an ID the
// store's clock reached. Another deployment's (counted by the store's
// client) is as none: a synced replica writes over it.
func (r *replicas) validHead(head sharedstore.Head) bool {
	switch {
	case head.Foreign:
		return false
	case head.Size > maxCheckpointBytes:
		r.invalidCheckpoint(head.ID, sharedstore.ErrCheckpointTooLarge)
		return false
	case !validCheckpointID(head.ID, head.Now):
		r.invalidCheckpoint(head.ID, errors.New("its ID is past the store's clock"))
		return false
	}
	return true
}

// invalidCheckpoint counts and logs a checkpoint that cannot be loaded,
// once per ID; a synced replica writes over it at its next snapshot.
func (r *replicas) invalidCheckpoint(id string, err error) {
	r.replaceCheckpoint(id)
	if r.sync.counted == id {
		return
	}
	r.sync.counted = id
	r.dropped.Inc()
	level.Warn(r.logger).Log("msg", "Skipped the store's checkpoint: it cannot be valid; a synced replica writes over it", "id", breach.LabelValue(id, breach.MaxValueBytes), "err", err)
}

// replaceCheckpoint has a synced replica write over checkpoint id at its
// next snapshot.
func (r *replicas) replaceCheckpoint(id string) {
	r.applying.Lock()
	r.sync.replace = id
	r.applying.Unlock()
}

// catchUp applies the continuity of the checkpoint started from and the
// events after the start state's, up to the newest, before anything
// serves; then one round says whether the replica is synced. A store that
// does not answer leaves them to the rounds.
func (r *replicas) catchUp(after string) {
	r.applying.Lock()
	r.last = after
	x, loaded := r.sync.start, r.held.loaded
	if x != nil {
		r.watchlist.RestoreContinuity(x.continuity())
		r.restorePage(x, time.Now())
		r.sync.start = nil
	}
	r.held.loaded = nil
	descends := r.sync.descends
	r.applying.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if descends {
		r.scanReplayed(ctx, after)
		r.rederive(ctx, after, x, loaded) // unwatched.go
		until, err := r.shared.Last(ctx)
		if err != nil {
			return
		}
		n := 0
		if _, err := r.shared.Read(ctx, orZero(after), until, func(ev sharedstore.Event) { r.apply(ev); n++ }); err != nil {
			level.Warn(r.logger).Log("msg", "Could not read all events after the start state; the rest follow once the store answers", "err", err)
		}
		level.Info(r.logger).Log("msg", "Caught up with the store", "events", n)
	}
	r.round(ctx)
}

// run follows the stream, forwards alerts and converges until ctx ends.
func (r *replicas) run(ctx context.Context, wg *sync.WaitGroup) {
	context.AfterFunc(ctx, r.stop)
	wg.Add(4)
	go func() { defer wg.Done(); r.shared.Run(ctx) }()
	go func() { defer wg.Done(); r.forward(ctx) }()
	go func() { defer wg.Done(); r.converge(ctx) }()
	go func() { defer wg.Done(); r.renewServing(ctx) }()
}

// converge runs a round every convergeEvery, and follows the stream while
// the state descends from a lineage, until ctx ends.
func (r *replicas) converge(ctx context.Context) {
	r.applying.Lock()
	descends, after := r.sync.descends, r.last
	r.applying.Unlock()
	if descends {
		r.startFollow(ctx, after)
	}
	defer r.stopFollow()
	t := time.NewTicker(convergeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, convergeEvery)
		if r.round(rctx) {
			r.startFollow(ctx, r.position())
		}
		cancel()
	}
}

func (r *replicas) position() string {
	r.applying.Lock()
	defer r.applying.Unlock()
	return r.last
}

// startFollow follows the stream from after, in place of the follow
// before (if any).
func (r *replicas) startFollow(ctx context.Context, after string) {
	r.stopFollow()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.sync.follow = followRun{cancel: cancel, done: done}
	go func() {
		defer close(done)
		r.shared.Follow(fctx, orZero(after), r.apply)
	}()
}

func (r *replicas) stopFollow() {
	if f := r.sync.follow; f.cancel != nil {
		f.cancel()
		<-f.done
		r.sync.follow = followRun{}
	}
}

// round looks at the store's head and acts on it (see the top of this
// file). It reports whether the state was replaced or a lineage started
// from a new position: the stream is then followed from it.
func (r *replicas) round(ctx context.Context) (moved bool) {
	// The position first, then the store's: an event the follower applies
	// in between would otherwise be past the head read before it, and
	// look like events the store lost (a new lineage for nothing).
	r.applying.Lock()
	last, lineage, descends := r.last, r.sync.lineage, r.sync.descends
	loss := lossSeen{held: r.sync.lost, at: r.sync.lostAt, fresh: r.sync.fresh, from: r.sync.from}
	seen := loss.at
	if r.sync.started != "" && !sharedstore.Before(r.sync.started, loss.held) {
		// This replica started its lineage from a state past the loss
		// (it saw it in the head first): the lineage holds what the
		// store lost.
		loss.held, loss.at = "", ""
	}
	held := r.mine.ids() // confirmed by the store before its head is read
	r.applying.Unlock()
	head, err := r.shared.Head(ctx)
	if err != nil {
		return false // the store's outage changes nothing a replica holds
	}
	if !r.checkLoss(ctx, &loss, seen) {
		return false
	}
	last = r.settleLostAt(held, head, last)
	switch {
	case r.lostWithCheckpoint(head, descends, loss):
		r.rewind(head, last)
	case !head.HasCheckpoint || !r.validHead(head):
		moved = r.withoutCheckpoint(head)
	case descends && r.sync.synced.Load() && loss.contends(head, last):
		r.rewind(head, last)
	case descends && head.Lineage == lineage:
		moved = r.ofLineage(ctx, head, last, loss)
	default:
		moved = r.resync(ctx, head, "lineage")
	}
	r.applying.Lock()
	if r.sync.lostAt == seen {
		r.sync.lost, r.sync.lostAt = "", "" // acted on (a resync cleared it already)
	}
	r.applying.Unlock()
	r.settleDuplicates()
	r.syncedRound(ctx, head)
	return moved
}

// lostWithCheckpoint reports whether the store lost its checkpoint and
// events this synced replica holds, and new entries followed before this
// round saw it (a FLUSHALL during traffic: loss.held, from the entries'
// prev). Writing this lineage's checkpoint again would leave the replicas
// that had read less, or more, before the loss on it for good, each
// missing what the other holds; a new lineage (rewind) settles them on
// one state, and the others pass again their own alerts it lacks
// (reforward.go).
func (r *replicas) lostWithCheckpoint(head sharedstore.Head, descends bool, loss lossSeen) bool {
	return !head.HasCheckpoint && descends && r.sync.synced.Load() && loss.held != ""
}

// syncedRound is the end of a round of a synced replica: the alerts a
// resync dropped passed again, the checkpoint's form checked, this
// replica's word that it is synced, and the checkpoint written at once
// when the store's is missing or behind.
func (r *replicas) syncedRound(ctx context.Context, head sharedstore.Head) {
	if !r.sync.synced.Load() {
		return
	}
	r.reforward(head)
	r.partsUnread(ctx, head)
	_ = r.shared.MarkSynced(ctx, syncedTTL)
	if r.sync.urgent {
		r.writeNow(ctx)
	}
}

// writeNow writes the checkpoint at once when the store's is missing,
// invalid or of an older lineage than this synced replica's, rather than
// at the next snapshot tick: replicas that are not synced wait for it.
// The per-replica parts are the snapshot's business, not the checkpoint's.
// It has the time a snapshot's write has, not the round's second: a first
// write of many addresses encodes and sends every part.
func (r *replicas) writeNow(ctx context.Context) {
	now := time.Now()
	if !r.sync.retry.due(now) {
		return
	}
	st := persist.State{SignedOnly: r.shared.SignedOnly()}
	st.Stream = r.take(func() { st.Watchlist, _ = r.watchlist.Save() })
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if err := r.checkpoint(wctx, st, nil, st.Stream); err != nil {
		r.sync.retry.failed(now)
		if suppressed, ok := r.logs.Allow("checkpoint-now"); ok {
			level.Warn(r.logger).Log("msg", "Could not write the checkpoint to the store; trying again", "in", r.sync.retry.wait, "err", err, ratelog.SuppressedKey, suppressed)
		}
		return
	}
	r.sync.urgent = false
	r.sync.retry = retryWrite{}
}

// maxRetryWait bounds writeNow's wait between tries: a store that takes
// writes again has the checkpoint within it.
const maxRetryWait = 8 * time.Second

// retryWrite paces writeNow while the store refuses the checkpoint (full,
// read-only, unreachable). Each try takes, encodes and sends the whole
// state: a refusal that lasts would cost that every round, and the
// garbage of each try grows the heap the runtime keeps. The wait doubles
// from a second up to maxRetryWait.
type retryWrite struct {
	at   time.Time     // no try before it
	wait time.Duration // the wait after the last refusal
}

func (w *retryWrite) due(now time.Time) bool { return !now.Before(w.at) }

func (w *retryWrite) failed(now time.Time) {
	w.wait = min(max(2*w.wait, time.Second), maxRetryWait)
	w.at = now.Add(w.wait)
}

// withoutCheckpoint is a round's step when the store has no valid
// checkpoint.
func (r *replicas) withoutCheckpoint(head sharedstore.Head) bool {
	if r.sync.synced.Load() {
		r.sync.behind.Store(true)
		r.sync.urgent = true
		return false
	}
	now := time.Now()
	if r.sync.noCheckpoint.IsZero() || head.SyncedAlive {
		r.sync.noCheckpoint = now
		return false
	}
	if now.Sub(r.sync.noCheckpoint) < syncedTTL {
		return false
	}
	r.applying.Lock()
	addresses := r.watchlist.Len()
	r.newLineage()
	r.applying.Unlock()
	r.sync.lineages.WithLabelValues("empty").Inc()
	r.setSynced(true)
	r.sync.behind.Store(true)
	r.sync.urgent = true
	level.Warn(r.logger).Log("msg", "No replica holds a history the store has: starting a new one from this replica's state (a new deployment, or a store that lost everything while no replica was synced)", "addresses", addresses)
	return true
}

// checkLoss checks the loss noteLost saw at entry seen, if any: the store
// lost the position held then only when it no longer holds its entry. An
// entry copied whole, its prev with it, or one forged with an earlier
// prev, names a loss that did not happen: it is forgotten, and logged.
// False when the store did not answer.
func (r *replicas) checkLoss(ctx context.Context, loss *lossSeen, seen string) bool {
	if loss.held == "" {
		return true
	}
	holds, err := r.shared.Holds(ctx, loss.held)
	if err != nil || !holds {
		return err == nil
	}
	r.applying.Lock()
	if r.sync.lostAt == seen {
		r.sync.lost, r.sync.lostAt = "", ""
	}
	r.applying.Unlock()
	if suppressed, ok := r.logs.Allow("not-lost"); ok {
		level.Warn(r.logger).Log("msg", "An entry of the store names an earlier last entry than the one before it, though the store still holds that one: a copied or forged entry, not a loss of the store's; ignored", "at", breach.LabelValue(seen, breach.MaxValueBytes), "held", loss.held, ratelog.SuppressedKey, suppressed)
	}
	loss.held, loss.at = "", ""
	return true
}

// newLineage starts a lineage from the state held. Called with applying
// held.
func (r *replicas) newLineage() {
	if !r.sync.fresh {
		r.sync.from = ""
		if r.sync.descends {
			r.sync.from = r.sync.lineage
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r.sync.lineage, r.sync.descends, r.sync.fresh = hex.EncodeToString(b[:]), true, true
	r.sync.noCheckpoint = time.Time{}
	if r.last == "" {
		r.last = "0-0"
	}
	r.sync.started = r.last
}

// lossSeen is what a round knows of events the store lost that this
// replica holds, besides the store's head: the position held when an
// entry applied named a prev before it, and that entry's ID (noteLost);
// and whether it started a lineage whose first checkpoint is not written
// yet (fresh), descended from lineage from.
type lossSeen struct {
	held, at string
	fresh    bool
	from     string
}

// contends reports whether a synced replica at position last holds events
// the store lost that the store's checkpoint does not hold, or started a
// lineage to hold them that is not written yet: it then starts a new
// lineage, or writes its first checkpoint again, rather than load the
// store's. The store lost them when the stream ends before last
// (rewound), or an entry applied named a prev before the position held
// (held). The checkpoint does not hold them when it is before held, or
// at or after the entry that showed the loss: written from the stream
// after the loss, by a replica that started from an older checkpoint. One
// in between was written before the loss by a replica further on; it
// holds all this one does (ofLineage loads it). A fresh lineage's first
// checkpoint replaces one of the lineage it descended from, or one
// holding an earlier event.
func (l lossSeen) contends(head sharedstore.Head, last string) bool {
	if l.held != "" {
		return sharedstore.Before(head.ID, l.held) || !sharedstore.Before(head.ID, l.at)
	}
	return rewound(last, head) || l.fresh && (l.from != "" && head.Lineage == l.from || sharedstore.Before(head.ID, last))
}

// rewind starts a new lineage from this replica's state, which holds
// events the store lost, to be written at once over the store's
// checkpoint (replace); when one is started already and not written yet,
// it writes it again.
func (r *replicas) rewind(head sharedstore.Head, held string) {
	r.sync.behind.Store(true)
	r.sync.urgent = true
	r.applying.Lock()
	fresh := r.sync.fresh
	if !fresh {
		r.newLineage()
	}
	r.sync.replace = head.ID
	r.applying.Unlock()
	if fresh {
		return
	}
	r.sync.lineages.WithLabelValues("rewound").Inc()
	level.Warn(r.logger).Log("msg", "The store lost events this replica holds (restarted from an older save?): starting a new lineage from this replica's state", "store_newest", head.LastGiven, "held", held)
}

// ofLineage is a round's step when the state descends from the lineage
// of the store's checkpoint.
func (r *replicas) ofLineage(ctx context.Context, head sharedstore.Head, last string, loss lossSeen) bool {
	r.sync.noCheckpoint = time.Time{}
	synced := r.sync.synced.Load()
	switch {
	case gap(last, head):
		if synced {
			r.setSynced(false)
			level.Warn(r.logger).Log("msg", "The store trimmed or deleted events this replica had not read; not synced until it loads a checkpoint past them", "after", last)
		}
		if !gap(head.ID, head) {
			return r.resync(ctx, head, "gap")
		}
		return false
	case loss.held != "" && sharedstore.Before(loss.held, head.ID),
		sharedstore.Before(last, head.ID) && (!head.Stream || sharedstore.Before(head.LastGiven, head.ID)):
		// The store lost events after this replica's position that its
		// checkpoint holds (written before the loss by a replica further
		// on: lossSeen.contends; or by the replica whose alerts the store
		// lost before any replica read them: mine.go): entries after the
		// loss, or none, do not bring them back.
		return r.resync(ctx, head, "gap")
	}
	r.sync.behind.Store(synced && sharedstore.Before(head.ID, last))
	caughtUp := !sharedstore.Before(last, r.sync.target) || !sharedstore.Before(last, head.Last)
	r.sync.target = head.Last
	if !synced && caughtUp {
		r.setSynced(true)
		level.Info(r.logger).Log("msg", "Synced with the store: this replica holds the store's checkpoint and every event after it", "stream", last)
	}
	return false
}

// gap reports whether the stream lost events after position p: deleted,
// or trimmed past p (a first entry after p that is not the next ID, or
// none left though the stream gave IDs after p). A
// replica that read from the beginning ("0-0") needs every entry the
// stream ever added.
func gap(p string, head sharedstore.Head) bool {
	if !head.Stream {
		return false
	}
	if p == "" || p == "0-0" {
		return head.Added > head.Length || head.MaxDeleted != "" && head.MaxDeleted != "0-0"
	}
	if sharedstore.Before(p, head.MaxDeleted) {
		return true
	}
	if head.First == "" {
		// Empty: trimmed whole past p when it ever gave a later ID.
		return sharedstore.Before(p, head.LastGiven)
	}
	return sharedstore.Before(p, head.First) && !sharedstore.Adjacent(p, head.First)
}

// rewound reports whether the store lost events up to p that its
// checkpoint does not hold: a replica loading it would miss them.
func rewound(p string, head sharedstore.Head) bool {
	if p == "" || p == "0-0" || !sharedstore.Before(head.ID, p) {
		return false
	}
	return !head.Stream || sharedstore.Before(head.LastGiven, p)
}

// resync replaces the state with the store's checkpoint, keeping the
// per-replica parts; the stream is then followed from the checkpoint on.
func (r *replicas) resync(ctx context.Context, head sharedstore.Head, reason string) bool {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	st, x, lineage, ok := r.loadCheckpoint(lctx, head)
	if !ok {
		return false
	}
	r.stopFollow()
	r.applying.Lock()
	r.expireHeld() // on the state they were held in
	r.watchlist.Replace(st.Watchlist, time.Now())
	if x != nil {
		r.watchlist.RestoreContinuity(x.continuity())
		r.restorePage(x, time.Now())
	}
	r.last = st.Stream
	r.sync.lineage, r.sync.descends, r.sync.fresh = lineage, true, false
	r.sync.lost, r.sync.lostAt, r.sync.started = "", "", ""
	r.sync.target = ""
	r.mine.reset()
	r.applied.restore(x.appliedWire(), st.Stream, time.Now())
	r.own.check = true      // reforward.go
	r.rebaseHeld(st.Stream) // unwatched.go
	r.applying.Unlock()
	r.setSynced(false)
	if r.sync.resynced != nil {
		r.sync.resynced()
	}
	r.rederive(lctx, st.Stream, x, st.Watchlist.Entries)
	r.sync.resyncs.WithLabelValues(reason).Inc()
	level.Info(r.logger).Log("msg", "Loaded the store's checkpoint in place of this replica's state", "reason", reason, "addresses", len(st.Watchlist.Entries), "stream", st.Stream)
	return true
}

// Checkpoints.

// take calls f with the state after a whole event, and returns the ID of
// that event when the replica is synced, "" when it is not (its state is
// then no checkpoint's, and its snapshot claims no stream position).
func (r *replicas) take(f func()) string {
	r.applying.Lock()
	defer r.applying.Unlock()
	f()
	r.sync.extra = nil
	if !r.sync.synced.Load() {
		return ""
	}
	x := checkpointExtra{V: eventFormat, ID: r.last, Page: pageWires(r.page.entries)}
	x.HeldAfter, x.Held = r.heldExtra()
	x.Applied = r.applied.wire(r.last)
	x = withContinuity(x, r.watchlist.SaveContinuity())
	r.sync.extra = &x
	return r.last
}

// checkpoint writes st, the state after event id (take's), as the store's
// checkpoint unless the store holds one of another lineage or a later one
// (then it sends no part of it): in parts, or whole (data: st encoded,
// nil when the caller has not encoded it) while a replica that reads it
// only whole is alive (checkpointOf). A start takes the shared state from
// it and keeps its own per-replica parts (the receiver's counts, the
// journal's point), which the checkpoint does not hold.
func (r *replicas) checkpoint(ctx context.Context, st persist.State, data []byte, id string) error {
	if id == "" {
		return nil // not synced
	}
	r.applying.Lock()
	extra, lineage, replace := r.sync.extra, r.sync.lineage, r.sync.replace
	isNew, from := r.sync.fresh, r.sync.from
	r.applying.Unlock()
	c, err := r.checkpointOf(ctx, st, data, extra, id)
	if err != nil {
		return err
	}
	c.Lineage, c.New, c.From = lineage, isNew, from
	saved, err := r.shared.WriteCheckpoint(ctx, c, replace)
	if saved {
		r.applying.Lock()
		if r.sync.replace == replace {
			r.sync.replace = ""
		}
		if r.sync.lineage == c.Lineage {
			r.sync.fresh = false
		}
		r.applying.Unlock()
		r.sync.behind.Store(false)
	}
	return err
}

// checkpointBehind reports whether this synced replica's last round found
// the store's checkpoint missing, invalid or holding less than it: a state
// that did not change is written again then, so that a replica that
// starts finds it.
func (r *replicas) checkpointBehind() bool {
	return r != nil && r.sync.synced.Load() && r.sync.behind.Load()
}

// continuity is the watchlist's form of x.
func (x *checkpointExtra) continuity() watchlist.Continuity {
	c := watchlist.Continuity{Up: map[string]bool{}, News: map[string]watchlist.News{}}
	for _, a := range x.Accounts {
		c.Up[a.Name] = a.Up
	}
	for _, n := range x.News {
		c.News[n.Key] = watchlist.News{NewDatabases: n.NewDatabases, SensitiveFields: n.SensitiveFields}
	}
	return c
}

// withContinuity is the checkpoint's extra x (its event ID, the page's
// acknowledgements, the alerts held) with c, in a stable order.
func withContinuity(x checkpointExtra, c watchlist.Continuity) checkpointExtra {
	for name, up := range c.Up {
		x.Accounts = append(x.Accounts, accountExtra{Name: name, Up: up})
	}
	slices.SortFunc(x.Accounts, func(a, b accountExtra) int { return strings.Compare(a.Name, b.Name) })
	x.News = newsOf(c.News)
	return x
}

func orZero(id string) string {
	if id == "" {
		return "0-0"
	}
	return id
}
