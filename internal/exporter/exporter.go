// SPDX-License-Identifier: Apache-2.0

// Package exporter wires the parts of breach_exporter together: the config
// bundle in force, the watchlist, the scheduler with its API
// client, the collector and the webhook receiver. A reload is one swap of
// the bundle plus one sync of the watchlist. main only parses flags and
// runs listeners.
package exporter

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/addrhttp"
	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/filewatch"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/scheduler"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// Options are the parts of an Exporter that come from flags, not the file.
type Options struct {
	ConfigFile string
	UserAgent  string // "breach_exporter/<version>"
	Logger     log.Logger
	Registerer prometheus.Registerer
	Clock      clockwork.Clock // nil = real clock
	// Webhook turns the receiver on: its secrets become mandatory.
	Webhook bool
	// StoragePath is the folder of the state snapshot; empty turns
	// persistence off.
	StoragePath string
	// SnapshotInterval is the most often the snapshot is written.
	SnapshotInterval time.Duration
	// WebConfigs are the listeners' exporter-toolkit web config files,
	// checked with the config at start and on every reload.
	WebConfigs []config.WebConfig
	// MaxRequests is the most /metrics requests served at once; the
	// others are answered 503. 0: no limit.
	MaxRequests int
	// AdvertiseURL is the URL of this process's /metrics for the other
	// replicas of its store, which pass scope=cluster scrapes to it while
	// it serves them (serving.go).
	AdvertiseURL string
}

// Exporter is the running program minus its listeners.
type Exporter struct {
	opts   Options
	logger log.Logger
	clock  clockwork.Clock

	config    *config.Current
	watchlist *watchlist.List
	renderer  *collector.Renderer
	hook      *webhook.Handler // nil when the receiver is off
	folder    *persist.Folder  // the state folder; nil when persistence is off
	journal   *persist.Journal // nil when either is off
	// replicas is the shared store's side, nil without a store section;
	// storeAtStart is that section as the process started with it, the
	// one in force until a restart.
	replicas     *replicas
	storeAtStart string

	// files reloads when the acknowledgements file changes, so that an
	// update (a ConfigMap's, say) is in force without a SIGHUP.
	files *filewatch.Watcher

	// addresses are the address files' last good contents; addressWatch
	// re-reads them when they change. syncing is held while they are read
	// and the watchlist synced to them and the config, by a reload or by
	// the watch: the two never interleave. No scrape, webhook, snapshot
	// or shutdown takes it.
	fileMetrics  *addrfile.Metrics
	addresses    map[string]*addrfile.Source // by account
	sdAddresses  map[string]*addrfile.Source // by account: addresses_sd_files
	addressWatch *filewatch.Watcher
	// http are the addresses_http sources (addresshttp.go), each fetched
	// by a goroutine of its own; a change syncs the watchlist as a change
	// of the files does.
	http        httpSources
	httpMetrics *addrhttp.Metrics
	syncing     sync.Mutex
	// page are the acknowledgements made on the page (pageacks.go), in
	// force merged with the file's; guarded by syncing.
	page []acknowledge.Entry

	// reloading holds a token while a reload runs, so reloads never race;
	// a channel, so that a caller waiting for its turn can give up.
	reloading chan struct{}
	// What the last snapshot saved, so an unchanged state is not written
	// again: the watchlist's generation and the webhook's count of bodies
	// remembered. Owned by Run, and by Close after Run has returned.
	savedGeneration, savedSeen uint64

	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge

	// The schedulers, one per account: started by Run for the accounts in
	// force and by a reload for the accounts it adds; one whose account a
	// reload removed returns by itself and is waited for here.
	apiMetrics *api.Metrics
	mu         sync.Mutex
	runCtx     context.Context // nil until Run starts
	schedulers map[string]chan struct{}
	running    sync.WaitGroup
}

// New loads the config and builds every part. Any problem is returned: the
// program must not start half-configured.
func New(o Options) (_ *Exporter, err error) {
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	bundle, err := config.LoadBundle(o.ConfigFile, o.loadOptions())
	if err != nil {
		return nil, err
	}
	e, err := newExporter(o, bundle)
	if err != nil {
		return nil, err
	}
	saved, err := e.openState(bundle)
	if err != nil {
		return nil, err
	}
	// From here on a failed start releases the folder.
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if err = e.restore(bundle, saved); err != nil {
		return nil, err
	}
	if err = e.resume(saved); err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{versioncollector.NewCollector("breach_exporter"), e.reloadOK, e.reloadTime} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	if e.files, err = filewatch.New(filewatch.Options{
		Reload: e.Reload,
		Limit:  fileread.MaxAcknowledgementsBytes,
		// No Clock: the watch keeps real time. Its debounce and backstop
		// wait for writes to files on disk, which happen in real time;
		// the exporter's clock schedules the API and the snapshots.
		Logger:     log.With(e.logger, "component", "filewatch"),
		Registerer: o.Registerer,
	}); err != nil {
		return nil, err
	}
	e.files.Watch(watchedFiles(bundle)...)
	e.markReload(true)
	return e, nil
}

// newExporter is the Exporter of bundle with its metrics, before any state
// is read.
func newExporter(o Options, bundle *config.Bundle) (*Exporter, error) {
	apiMetrics, err := api.NewMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	fileMetrics, err := addrfile.NewMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	httpMetrics, err := addrhttp.NewMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Exporter{
		opts:         o,
		logger:       o.Logger,
		clock:        o.Clock,
		config:       config.NewCurrent(bundle),
		watchlist:    watchlist.New(),
		storeAtStart: storeSection(bundle),
		fileMetrics:  fileMetrics,
		addresses:    map[string]*addrfile.Source{},
		sdAddresses:  map[string]*addrfile.Source{},
		http:         httpSources{byURL: map[string]*httpSource{}, changed: make(chan struct{}, 1)},
		httpMetrics:  httpMetrics,
		reloading:    make(chan struct{}, 1),
		apiMetrics:   apiMetrics,
		schedulers:   map[string]chan struct{}{},
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_successful",
			Help: "1 when the last config load succeeded, else 0.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_success_timestamp_seconds",
			Help: "When the config was last loaded successfully (Unix seconds).",
		}),
	}, nil
}

// openState connects to the shared store (with a store section), opens
// and locks the state folder (with --storage.path) and returns the state
// to start from: the snapshot's, or the store's checkpoint where it is
// newer; nil for none. On error, what it opened is released.
func (e *Exporter) openState(bundle *config.Bundle) (*persist.State, error) {
	o := e.opts
	if bundle.Config.Store != nil {
		if o.Webhook && o.StoragePath == "" {
			// 204 promises the alert is durable: with replicas, in this
			// replica's journal until the store holds it.
			return nil, fmt.Errorf("store: --storage.path is required with a store and the webhook receiver: each replica keeps the alerts it accepted in its own journal until the store holds them")
		}
		var err error
		if e.replicas, err = newReplicas(bundle, o.StoragePath, o.Registerer, log.With(e.logger, "component", "store"), e.watchlist, e.config); err != nil {
			return nil, err
		}
		e.replicas.sync.resynced = e.resyncWatchlist
		e.replicas.serving = newServing(o.AdvertiseURL)
	}
	var saved *persist.State
	if o.StoragePath != "" {
		var err error
		if e.folder, err = persist.Open(o.StoragePath, o.Registerer, log.With(e.logger, "component", "persist")); err != nil {
			e.release()
			return nil, fmt.Errorf("--storage.path %q: %w", o.StoragePath, err)
		}
		if st, ok := e.folder.Load(); ok {
			saved = &st
		}
	}
	if e.replicas != nil {
		saved = e.replicas.start(saved)
	}
	return saved, nil
}

// restore puts saved (nil: nothing) in the watchlist, then syncs it to the
// config and the address files: the first sync drops what the snapshot
// holds and the config no longer allows. The address files are read first:
// their addresses are watched from the first scrape on.
func (e *Exporter) restore(bundle *config.Bundle, saved *persist.State) error {
	if e.folder != nil {
		e.page = e.folder.LoadPage(e.clock.Now())
		bundle = e.withPage(bundle)
		e.config.Store(bundle)
	}
	if e.replicas != nil {
		e.replicas.openPage(e.folder, e.page, e.clock.Now())
	}
	if saved != nil {
		e.watchlist.Restore(saved.Watchlist, e.clock.Now())
	}
	var err error
	if e.addressWatch, err = filewatch.New(filewatch.Options{
		Reload:     e.rereadAddresses,
		MaxMatches: addrfile.MaxFilesPerGlob,
		Limit:      max(fileread.MaxAddressListBytes, fileread.MaxAddressYAMLBytes),
		Logger:     log.With(e.logger, "component", "addresses_files"),
	}); err != nil {
		return err
	}
	e.watchAddresses(bundle)
	e.readAddresses(bundle)
	e.configureHTTP(bundle)
	e.syncWatchlist(bundle)
	e.warn(bundle)
	if saved != nil {
		restored := 0
		for _, se := range saved.Watchlist.Entries {
			if e.watchlist.Watches(se.Address.Email) {
				restored++
			}
		}
		if e.folder != nil {
			e.folder.Restored(restored)
		}
		level.Info(e.logger).Log("msg", "Restored the state snapshot", "addresses", restored, "remembered_webhooks", len(saved.Seen))
	}
	for _, a := range bundle.Accounts {
		e.apiMetrics.Ensure(a.Name)
	}
	e.renderer = collector.NewRenderer(e.watchlist, e.config, e.opts.Webhook)
	return nil
}

// resume starts the receiver (with --webhook.listen-address), with
// the journal's alerts since saved, catches up with the shared store's
// stream and notes the state the next snapshot compares with.
func (e *Exporter) resume(saved *persist.State) error {
	var replayed int
	if e.opts.Webhook {
		var err error
		if replayed, err = e.startReceiver(saved); err != nil {
			return err
		}
	}
	if e.replicas != nil {
		var after string
		if saved != nil {
			after = saved.Stream
		}
		e.replicas.catchUp(after)
		e.syncing.Lock()
		e.refreshPage()
		e.syncing.Unlock()
	}
	e.savedGeneration, e.savedSeen = e.changes()
	if replayed > 0 {
		// The next tick folds the replayed alerts into a snapshot.
		e.savedSeen = 0
	}
	return nil
}

// watchedFiles are the files of bundle whose change is reloaded without a
// SIGHUP: the acknowledgements, which change while the exporter runs.
func watchedFiles(bundle *config.Bundle) []string {
	return []string{bundle.Config.AcknowledgementsFile}
}

// startReceiver builds the webhook handler with what it held before the
// restart: the snapshot's duplicate memory and counts, then the journal's
// alerts accepted since. It returns how many alerts the journal replayed.
func (e *Exporter) startReceiver(saved *persist.State) (int, error) {
	if e.folder != nil {
		var err error
		e.journal, err = e.folder.OpenJournal(persist.JournalOptions{
			Registerer:     e.opts.Registerer,
			Logger:         log.With(e.logger, "component", "journal"),
			Clock:          e.clock,
			MaxRecordBytes: config.MaxWebhookBodyBytes,
		})
		if err != nil {
			return 0, fmt.Errorf("--storage.path %q: journal: %w", e.opts.StoragePath, err)
		}
	}
	var err error
	o := webhook.Options{
		Config:    e.config,
		Watchlist: e.watchlist,
		Clock:     e.clock,
		Logger:    log.With(e.logger, "component", "webhook"),
		Journal:   e.journalOrNil(),
	}
	replay := func(a watchlist.AcceptedAlert) { e.hook.Replay(a) }
	if r := e.replicas; r != nil {
		if err := r.openConfirmed(e.folder); err != nil {
			return 0, fmt.Errorf("--storage.path %q: %w", e.opts.StoragePath, err)
		}
		o.Forward = func(a watchlist.AcceptedAlert) { r.queue(a, false) }
		o.Full = r.full
		// Replayed, an alert goes to the store again: the store counts
		// the ones it did not get before the restart, once.
		replay = func(a watchlist.AcceptedAlert) {
			e.hook.Remember(a)
			r.queue(a, true)
		}
	}
	if e.hook, err = webhook.NewHandler(e.opts.Registerer, o); err != nil {
		return 0, err
	}
	if e.replicas != nil {
		e.replicas.hook = e.hook
	}
	if saved != nil {
		e.hook.Restore(saved.Seen)
		e.hook.RestoreCounts(saved.Webhook)
	}
	if e.journal == nil {
		return 0, nil
	}
	var position uint64
	if saved != nil {
		position = saved.Journal
	}
	// Each record is applied as it is read: the journal is never held
	// whole in memory.
	replayed, err := e.journal.Replay(position, replay)
	if err != nil {
		return 0, fmt.Errorf("--storage.path %q: journal: %w", e.opts.StoragePath, err)
	}
	if replayed > 0 {
		level.Info(e.logger).Log("msg", "Replayed the journal: alerts accepted after the last snapshot", "alerts", replayed)
	}
	return replayed, nil
}

// journalOrNil keeps a nil *persist.Journal from becoming a non-nil
// webhook.Journal.
func (e *Exporter) journalOrNil() webhook.Journal {
	if e.journal == nil {
		return nil
	}
	return e.journal
}

func (o Options) loadOptions() config.LoadOptions {
	return config.LoadOptions{UserAgent: o.UserAgent, Webhook: o.Webhook, WebConfigs: o.WebConfigs}
}

// connect builds the API client of an account in a config bundle; every
// client counts into the same metrics, under its account, and checks times
// against the same clock.
func connect(m *api.Metrics, clock clockwork.Clock) func(*config.Bundle, *config.AccountBundle) scheduler.Client {
	return func(s *config.Bundle, a *config.AccountBundle) scheduler.Client {
		return api.New(api.Options{
			BaseURL:      a.BaseURL,
			HTTPClient:   s.HTTPClient,
			Token:        a.Token.Get,
			Timeout:      time.Duration(s.Config.API.Timeout),
			MaxBodyBytes: config.APIMaxResponseBytes,
			Metrics:      m,
			Account:      a.Name,
			Now:          clock.Now,
		})
	}
}

// startSchedulers starts a scheduler for each account of bundle that has
// none running, once Run has started. A scheduler whose account is gone
// returns by itself (it reads the bundle in force before each request);
// one for the same name starts only after it did, so one key never has two.
func (e *Exporter) startSchedulers(bundle *config.Bundle) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runCtx == nil {
		return
	}
	for _, a := range bundle.Accounts {
		e.apiMetrics.Ensure(a.Name)
		done, ok := e.schedulers[a.Name]
		if ok {
			select {
			case <-done:
			default:
				continue // still running
			}
		}
		done = make(chan struct{})
		e.schedulers[a.Name] = done
		var shared scheduler.SharedStore
		var outcomes scheduler.Outcomes
		if e.replicas != nil {
			shared, outcomes = e.replicas.shared, e.replicas
		}
		s := scheduler.New(scheduler.Options{
			SharedStore: shared,
			Outcomes:    outcomes,
			Watchlist:   e.watchlist,
			Config:      e.config,
			Account:     a.Name,
			Connect:     connect(e.apiMetrics, e.clock),
			Clock:       e.clock,
			Logger:      log.With(e.logger, "component", "scheduler"),
			Webhook:     e.opts.Webhook,
		})
		e.running.Add(1)
		go e.runScheduler(s, a.Name, done)
	}
}

// runScheduler runs s until Run ends or its account is gone, and then
// removes the account's API series. Decided under e.mu: a reload that adds
// the account back at that moment either finds s still running (and s goes
// on) or finds it done and starts another.
func (e *Exporter) runScheduler(s *scheduler.Scheduler, name string, done chan struct{}) {
	defer e.running.Done()
	for {
		s.Run(e.runCtx)
		e.mu.Lock()
		if e.runCtx.Err() != nil || e.config.Load().Account(name) == nil {
			close(done)
			if e.runCtx.Err() == nil {
				e.apiMetrics.Forget(name)
			}
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
	}
}

// readAddresses reads the address files of bundle's globs, logs what is
// wrong with them, and reports whether their addresses changed.
func (e *Exporter) readAddresses(bundle *config.Bundle) bool {
	cfg := bundle.Config
	changed := false
	inForce := map[string]bool{}
	claimed := map[string]string{} // file: the first account whose globs match it
	for _, a := range cfg.AccountsInForce() {
		inForce[a.Name] = true
		src := e.source(a.Name)
		src.SetLabels(config.GlobLabels(a.AddressesFiles))
		r := e.readAccountFiles(src, config.Globs(a.AddressesFiles), cfg)
		sd := e.readAccountFiles(e.sdSource(a.Name), a.AddressesSDFiles, cfg)
		changed = r.Changed || sd.Changed || changed
		for _, f := range append(r.Files, sd.Files...) {
			if first, dup := claimed[f.Path]; dup {
				// Its addresses belong to the first account (watched's
				// merge), and its metrics show it once.
				level.Warn(e.logger).Log("msg", "An address file is matched by two accounts' globs; its addresses belong to the first", "file", f.Path, "account", first, "also", a.Name)
				continue
			}
			claimed[f.Path] = a.Name
		}
	}
	// A removed account's files are read as none: their series go.
	for _, sources := range []map[string]*addrfile.Source{e.addresses, e.sdAddresses} {
		for name, src := range sources {
			if !inForce[name] {
				changed = e.readAccountFiles(src, nil, cfg).Changed || changed
			}
		}
	}
	return changed
}

// sdSource is the Source of an account's addresses_sd_files.
func (e *Exporter) sdSource(account string) *addrfile.Source {
	return e.accountSource(e.sdAddresses, account, addrfile.NewSDSource)
}

// source is the address files' Source of an account: one each, so that a
// file's addresses are the account's whose glob matched it.
func (e *Exporter) source(account string) *addrfile.Source {
	return e.accountSource(e.addresses, account, addrfile.NewSource)
}

// accountSource is account's Source in sources, made by newSource the
// first time.
func (e *Exporter) accountSource(sources map[string]*addrfile.Source, account string, newSource func(*addrfile.Metrics) *addrfile.Source) *addrfile.Source {
	s := sources[account]
	if s == nil {
		s = newSource(e.fileMetrics)
		sources[account] = s
	}
	return s
}

// readAccountFiles reads one account's globs into its Source and logs
// what is wrong with them.
func (e *Exporter) readAccountFiles(src *addrfile.Source, globs []string, cfg *config.Config) addrfile.Read {
	src.Allow(cfg.OwnerLabels)
	r := src.Read(globs, e.clock.Now(), cfg.Labels.ShowsAddresses())
	for _, err := range r.Failed {
		level.Warn(e.logger).Log("msg", "Address file not usable; its last good content stays", "err", err)
	}
	// Once per content: what a file's change brought, not every read.
	for _, l := range r.Invalid {
		level.Warn(e.logger).Log("msg", "Skipped a line of an address file", "file", l.File, "line", l.Line, "reason", l.Reason)
	}
	if r.OverLimit > 0 {
		level.Warn(e.logger).Log("msg", "Address files past the limit of a glob are not read", "files", r.OverLimit, "limit", addrfile.MaxFilesPerGlob)
	}
	return r
}

// watchAddresses points the address watch at bundle's globs and interval.
// Called before the files are read: a change after the read is then
// always seen (at worst read twice), never missed.
func (e *Exporter) watchAddresses(bundle *config.Bundle) {
	var globs []string
	for _, a := range bundle.Config.AccountsInForce() {
		globs = append(globs, config.Globs(a.AddressesFiles)...)
		globs = append(globs, a.AddressesSDFiles...)
	}
	e.addressWatch.SetInterval(time.Duration(bundle.Config.Refresh.FilesInterval))
	e.addressWatch.Watch(globs...)
}

// rereadAddresses is the address watch's callback: it reads the address
// files of the bundle in force again and syncs the watchlist when their
// addresses changed. A file that fails keeps its last good content, so it
// returns no error. The reading runs apart, as a reload does: a read that
// hangs (a dead network mount) holds back only the next reread, never the
// end of Run, and so never a clean shutdown.
func (e *Exporter) rereadAddresses(ctx context.Context) error {
	return apart(ctx, e.syncAddresses)
}

// apart runs work in a goroutine of its own and waits for it until ctx
// ends: work that hangs then holds back only itself.
func apart(ctx context.Context, work func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		work()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// syncAddresses is rereadAddresses's work.
func (e *Exporter) syncAddresses() {
	e.syncing.Lock()
	defer e.syncing.Unlock()
	bundle := e.config.Load()
	start := time.Now()
	if e.readAddresses(bundle) {
		e.syncWatchlist(bundle)
		level.Info(e.logger).Log("msg", "Address files changed", "addresses", e.watchlist.Len(), "duration", time.Since(start))
	}
}

// syncWatchlist makes the watchlist watch what bundle configures: its
// addresses, then those of the address files no earlier source has, under
// its label mode, and discovered ones within its limit (none with
// discovery off). Called with syncing held, or before anything runs.
func (e *Exporter) syncWatchlist(bundle *config.Bundle) {
	cfg := bundle.Config
	e.watchlist.Sync(cfg.AccountNames(), e.watched(cfg), bundle.Labels, cfg.Webhook.DiscoveryLimit())
	// With replicas: what the stream brought for addresses watched now.
	e.replicas.adopt(time.Duration(cfg.Refresh.FilesInterval))
	// An acknowledgement takes effect at the latest when it is first
	// loaded (acknowledge.Entry.Covers), on this clock.
	e.watchlist.NoteAcknowledgements(bundle.Acknowledgements, e.clock.Now())
	if bundle.Acknowledgements == nil {
		return
	}
	// Addresses come and go (a discovered one may come back with its next
	// alert): an acknowledgement for one not watched now is kept, and said.
	watched := map[string]bool{}
	for _, en := range e.watchlist.View().Entries {
		watched[en.Address.Key()] = true
	}
	for _, w := range bundle.Acknowledgements.Unwatched(func(k string) bool { return watched[k] }) {
		level.Warn(e.logger).Log("msg", "Acknowledgement for an address that is not watched", "file", cfg.AcknowledgementsFile, "err", w)
	}
}

// watched is what cfg configures, then, account by account, the addresses
// of its addresses_files, then of its addresses_sd_files, then of its
// addresses_http in listed order, that no earlier source has (the first
// wins, with its owner labels, counted in the file's or URL's metrics): a
// file's or URL's addresses are its account's. One log line a file (or
// URL) and owner says where its duplicates stay, at every sync (a change
// of the files or a list, a reload) while it lasts.
func (e *Exporter) watched(cfg *config.Config) []breach.Address {
	all := slices.Clone(cfg.Watched())        // appended to: never the config's own
	seen := make(map[string]string, len(all)) // by key, the account
	for _, a := range all {
		seen[a.Key()] = a.AccountName()
	}
	for _, a := range cfg.AccountsInForce() {
		for _, src := range append([]merger{e.source(a.Name), e.sdSource(a.Name)}, e.httpMergers(&a)...) {
			n := len(all)
			var elsewhere []addrfile.Elsewhere
			all, elsewhere = src.MergeInto(seen, a.Name, all)
			for i := n; i < len(all); i++ {
				all[i].Account = a.Name
			}
			e.logElsewhere(a.Name, elsewhere)
		}
	}
	return all
}

// merger is a source of addresses merged into the watched ones: an
// account's address files, its file_sd files, one of its HTTP sources.
type merger interface {
	MergeInto(seen map[string]string, owner string, out []breach.Address) ([]breach.Address, []addrfile.Elsewhere)
}

// logElsewhere says where the duplicates of account's files stay.
func (e *Exporter) logElsewhere(account string, elsewhere []addrfile.Elsewhere) {
	for _, x := range elsewhere {
		if x.Owner != account {
			level.Warn(e.logger).Log("msg", "Addresses of an address file (or HTTP source) are another account's already; they stay that account's (an address belongs to one account)",
				"file", x.File, "account", account, "other_account", x.Owner, "addresses", x.Addresses)
			continue
		}
		level.Warn(e.logger).Log("msg", "Addresses of an address file (or HTTP source) are already watched from an earlier source (the config, an earlier file or URL); the first source and its owner labels stand",
			"file", x.File, "account", account, "addresses", x.Addresses)
	}
}

// warn logs what the bundle's config gets wrong that does not matter yet,
// such as a secret file that cannot be read while the receiver is off.
func (e *Exporter) warn(bundle *config.Bundle) {
	for _, w := range bundle.Warnings {
		level.Warn(e.logger).Log("msg", "Configuration problem ignored", "problem", w)
	}
}

// Run polls the API and writes the state snapshot every interval until ctx
// ends. Reloads run apart (Reload), so a slow one never holds back a
// snapshot or the end of Run. Call Close after Run returns and the
// listeners are shut down, for the last snapshot.
func (e *Exporter) Run(ctx context.Context) {
	e.mu.Lock()
	e.runCtx = ctx
	e.mu.Unlock()
	e.startSchedulers(e.config.Load())
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		e.files.Run(ctx)
	}()
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		e.addressWatch.Run(ctx)
	}()
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		e.syncOnHTTPChange(ctx)
	}()
	e.http.mu.Lock()
	e.startHTTP()
	e.http.mu.Unlock()
	if e.replicas != nil {
		e.replicas.run(ctx, &e.running)
		e.runPage(ctx)
	}
	var tick <-chan time.Time
	if e.folder != nil || e.replicas != nil {
		t := e.clock.NewTicker(e.opts.SnapshotInterval)
		defer t.Stop()
		tick = t.Chan()
	}
	for {
		select {
		case <-ctx.Done():
			e.running.Wait()
			return
		case <-tick:
			e.replicas.releaseExpired()
			if err := e.Save(); err != nil {
				level.Error(e.logger).Log("msg", "State snapshot failed; the previous one stays", "err", err)
			}
		}
	}
}

// changes returns what tells whether the state worth saving changed; it
// copies nothing.
func (e *Exporter) changes() (generation, seen uint64) {
	generation = e.watchlist.Generation()
	if e.hook != nil {
		seen = e.hook.RememberedChanges()
	}
	return generation, seen
}

// Save writes the state snapshot when anything changed since the last one;
// without persistence it does nothing. With replicas, the same encoding is
// the shared store's checkpoint.
func (e *Exporter) Save() error {
	if e.folder == nil && e.replicas == nil {
		return nil
	}
	// Checked before anything is copied: most ticks find nothing new.
	if generation, seen := e.changes(); generation == e.savedGeneration && seen == e.savedSeen && !e.replicas.checkpointBehind() {
		return nil
	}
	c := e.cutState()
	var written bool
	var err error
	if e.replicas == nil {
		written, err = true, e.folder.Save(c.state, e.clock.Now())
	} else {
		written, err = e.saveReplicated(c)
	}
	if err != nil || !written {
		return err
	}
	e.savedGeneration, e.savedSeen = c.generation, c.seen
	e.dropFromJournal(c)
	return nil
}

// dropFromJournal removes the journal's records up to the cut's mark,
// which a written snapshot holds, and the store's confirmations of them.
func (e *Exporter) dropFromJournal(c *stateCut) {
	if e.journal == nil {
		return
	}
	if err := e.journal.Drop(c.mark); err != nil {
		level.Warn(e.logger).Log("msg", "Could not remove journal files the snapshot holds; the next start skips their records", "err", err)
	}
	e.replicas.compactConfirmed(c.confirmedMark)
}

// stateCut is the state as one moment of the journal and, with replicas,
// of the shared store's stream had it.
type stateCut struct {
	state persist.State
	// mark is the journal's position at the cut; what the snapshot holds
	// is dropped from the journal once it is written.
	mark persist.Mark
	// keep: the journal holds alerts the store does not yet, whose records
	// must stay; no local snapshot is written.
	keep bool
	// confirmedMark is the end of the store's confirmations at the cut:
	// those before it are in the snapshot's journal records no more.
	confirmedMark uint64
	// What changes returned at the cut.
	generation, seen uint64
}

// cutState copies the state to save: between two journal writes, so that
// the state and the journal position agree, and with replicas after a
// whole event of the stream, with its ID.
func (e *Exporter) cutState() *stateCut {
	c := &stateCut{}
	grab := func() {
		c.state.Watchlist, c.generation = e.watchlist.Save()
		if e.hook != nil {
			c.state.Seen, c.seen = e.hook.Remembered()
			c.state.Webhook = e.hook.Counts()
		}
	}
	take := grab
	if e.replicas != nil {
		// Under the lock the state is copied in: an alert the store
		// confirmed that this replica has not applied yet is not in it
		// (mine.go), so its journal record stays.
		take = func() {
			c.state.Stream = e.replicas.take(func() { grab(); c.keep = c.keep || e.replicas.unapplied() })
		}
		c.state.SignedOnly = e.replicas.shared.SignedOnly()
	}
	if e.journal == nil {
		take()
		return c
	}
	c.mark = e.journal.Cut(func() {
		// The backlog before the state: an alert leaves the backlog only
		// once it is in mine, so it is seen in one or the other.
		c.keep = e.replicas != nil && e.replicas.pending()
		take()
		c.confirmedMark = e.replicas.confirmedMark()
	})
	c.state.Journal = c.mark.Position
	return c
}

// saveReplicated writes the store's checkpoint of c (in parts,
// converge.go) and the local snapshot. written is false when the snapshot waits: the
// snapshot, its journal point and the receiver's counts go together,
// written once the store holds every alert again.
func (e *Exporter) saveReplicated(c *stateCut) (written bool, _ error) {
	start, now := time.Now(), e.clock.Now()
	data, err := persist.Encode(c.state, now)
	if err != nil {
		return false, err
	}
	e.writeCheckpoint(c.state, data)
	switch {
	case e.folder == nil:
		return true, nil
	case c.keep:
		return false, nil
	}
	return true, e.folder.SaveEncoded(data, start, now)
}

// writeCheckpoint writes st, the state at the stream's event st.Stream
// (data: encoded, for a checkpoint written whole), as the shared store's
// checkpoint (converge.go); a failure is logged, not returned: the local
// snapshot does not wait for the store.
func (e *Exporter) writeCheckpoint(st persist.State, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := e.replicas.checkpoint(ctx, st, data, st.Stream); err != nil {
		if suppressed, ok := e.replicas.logs.Allow("checkpoint"); ok {
			level.Warn(e.logger).Log("msg", "Could not write the checkpoint to the store; another replica's, or the next one, serves a start", "err", err, ratelog.SuppressedKey, suppressed)
		}
	}
}

// Close writes the last snapshot and releases the state folder: call it
// once, after Run has returned and the listeners are shut down.
func (e *Exporter) Close() error {
	err := e.Save()
	if n := e.replicas.waitingCount(); n > 0 {
		// They stay in the journal for the next start: an operator who
		// deletes this replica's folder (an emptyDir's pod) loses them.
		level.Warn(e.logger).Log("msg", "Stopping with alerts accepted here that the store does not hold yet; they are passed on at the next start from this folder, and lost with it", "alerts", n)
	}
	if e.replicas != nil {
		// The next scrape finds another replica serving at once.
		e.replicas.releaseServing(context.Background())
	}
	e.release()
	return err
}

// release stops the file watch, closes the journal and unlocks the storage
// folder.
func (e *Exporter) release() {
	if e.files != nil {
		e.files.Close()
	}
	if e.addressWatch != nil {
		e.addressWatch.Close()
	}
	e.closeHTTP()
	if e.journal != nil {
		e.journal.Close()
	}
	if e.folder != nil {
		e.folder.Close()
	}
	if e.replicas != nil {
		e.replicas.close()
	}
}

// Reload reloads the config, one reload at a time (SIGHUP and /-/reload
// never race), and waits for the outcome until ctx ends. The load reads
// files, which can be slow (a hung network mount): it runs in a goroutine
// of its own holding no lock that scrapes, webhooks, snapshots or the
// shutdown need, so whatever it waits for holds back only later reloads.
// A caller that gives up leaves it to finish; its outcome then shows in
// the log and breach_exporter_config_last_reload_successful.
func (e *Exporter) Reload(ctx context.Context) error {
	select {
	case e.reloading <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("another reload is still running: %w", ctx.Err())
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-e.reloading }()
		done <- e.reload()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the reload is still running: %w", ctx.Err())
	}
}

// reload loads a new bundle and, only when all of it loaded, puts it in
// force and syncs the watchlist to it; a failure keeps the old one whole.
func (e *Exporter) reload() error {
	bundle, err := config.LoadBundle(e.opts.ConfigFile, e.opts.loadOptions())
	if err != nil {
		e.markReload(false)
		level.Error(e.logger).Log("msg", "Config reload failed; keeping the previous config", "err", err)
		return err
	}
	if section := storeSection(bundle); section != e.storeAtStart {
		level.Warn(e.logger).Log("msg", "The store section changed; the change takes effect at the next restart, the store in use stays")
	}
	e.files.Watch(watchedFiles(bundle)...)
	e.syncing.Lock()
	// Under syncing, so that a change on the page is either in the bundle
	// merged here or made on it after.
	bundle = e.withPage(bundle)
	e.config.Store(bundle)
	e.watchAddresses(bundle)
	e.readAddresses(bundle)
	e.configureHTTP(bundle)
	e.syncWatchlist(bundle)
	e.syncing.Unlock()
	e.startSchedulers(bundle)
	e.warn(bundle)
	e.markReload(true)
	level.Info(e.logger).Log("msg", "Config reloaded", "accounts", len(bundle.Accounts), "addresses", e.watchlist.Len())
	return nil
}

func (e *Exporter) markReload(ok bool) {
	if ok {
		e.reloadOK.Set(1)
		e.reloadTime.Set(float64(e.clock.Now().UnixMilli()) / 1000)
		return
	}
	e.reloadOK.Set(0)
}

// MetricsHandler serves the gatherer's families and the per-address series together at
// /metrics. The renderer is not a registry collector: it renders each
// address's lines once and copies them into every scrape, which at 10,000
// addresses is what keeps a scrape under a second (bench/README.md). The
// handler is instrumented as promhttp's, its metrics registered with
// Options.Registerer, and serves at most Options.MaxRequests at once.
func (e *Exporter) MetricsHandler(gatherer prometheus.Gatherer) http.Handler {
	return collector.Instrument(e.opts.Registerer, e.clusterScope(collector.NewHandler(e.renderer, gatherer, e.logger)), e.opts.MaxRequests)
}

// WebhookHandler is the receiver's handler, nil when it is off.
func (e *Exporter) WebhookHandler() *webhook.Handler { return e.hook }

// storeSection is what of the store section a reload cannot change: the
// whole section: the client and the keys are made once, at the start.
func storeSection(bundle *config.Bundle) string {
	if sc := bundle.Config.Store; sc != nil {
		section, tls := *sc, config.StoreTLS{}
		if sc.TLS != nil {
			tls = *sc.TLS
		}
		section.TLS = nil
		return fmt.Sprintf("%#v %#v", section, tls)
	}
	return ""
}
