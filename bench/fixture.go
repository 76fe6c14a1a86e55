// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/exporter"
)

// credentials are made up for each run and live only in a temporary
// directory, never in the repository.
type credentials struct {
	token  string // svc_ak_..., what the simulator accepts
	secret []byte // webhook HMAC key
}

func newCredentials() credentials {
	return credentials{token: "svc_ak_bench_" + randomHex(12), secret: []byte(randomHex(24))}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// exporterSetup is what a measurement needs from an exporter's config.
type exporterSetup struct {
	baseURL           string // API root, ending in /api/v1
	emails            []string
	requestsPerMinute int
	clock             clockwork.Clock // nil: real
	webhook           bool
	persist           bool // state folder on: the webhook journal syncs every accepted alert
	// addressFiles, when not 0, puts the emails in that many address files
	// (addresses/NN.txt, addresses_files) rather than in the config.
	addressFiles int
	// ownerLabels makes those files file_sd-shaped (addresses/NN.json,
	// addresses_sd_files), every address with owner labels: ownerGroup's.
	ownerLabels bool
	// otherAccounts are the webhook secrets of more accounts, listed
	// before the one that holds emails, creds.token and creds.secret:
	// with any, the config has the accounts shape, each other account with
	// one address and a token of its own (which the simulator, knowing one
	// token, refuses: those accounts pause on their 401 and stay quiet).
	otherAccounts [][]byte
	// refreshInterval is refresh.interval; "" is the service's 15m.
	refreshInterval string
	// storeURL, when set, is the store section's url, with storePrefix
	// its key_prefix: the replicated mode.
	storeURL, storePrefix string
}

// runningExporter is an exporter built from a config file in a temporary
// directory, with its own registry.
type runningExporter struct {
	exp *exporter.Exporter
	reg *prometheus.Registry
	dir string
}

// newExporter writes the config, token and secret files and builds the
// exporter the way main does. The caller runs it (or not) and calls close.
func newExporter(s exporterSetup, creds credentials) (*runningExporter, error) {
	dir, err := os.MkdirTemp("", "breach-bench-")
	if err != nil {
		return nil, err
	}
	if err := writeExporterFiles(dir, s, creds); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	reg := prometheus.NewRegistry()
	storage := ""
	if s.persist {
		storage = filepath.Join(dir, "data")
	}
	exp, err := exporter.New(exporter.Options{
		ConfigFile: filepath.Join(dir, "config.yml"),
		UserAgent:  "breach_exporter/bench",
		Logger:     productionLogger(),
		Registerer: reg,
		Clock:      s.clock,
		Webhook:    s.webhook,
		// On the machine's disk, as deployed: os.MkdirTemp's folder.
		StoragePath:      storage,
		SnapshotInterval: time.Minute,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &runningExporter{exp: exp, reg: reg, dir: dir}, nil
}

// writeExporterFiles writes config.yml (receiver on), token and secret
// into dir.
func writeExporterFiles(dir string, s exporterSetup, creds credentials) error {
	files := map[string][]byte{"token": []byte(creds.token), "secret": creds.secret}
	var cfg strings.Builder
	// The defaults of the real service: an address is re-read every 15m at
	// most, so the budget, not the interval, limits a large address list.
	fmt.Fprintf(&cfg, "refresh:\n  interval: %s\n  me_interval: 5m\n", cmp.Or(s.refreshInterval, "15m"))
	if s.storeURL != "" {
		fmt.Fprintf(&cfg, "store:\n  url: %s\n  key_prefix: %s\n", s.storeURL, s.storePrefix)
	}
	if len(s.otherAccounts) == 0 {
		fmt.Fprintf(&cfg, "api:\n  base_url: %s\n  token_file: token\n  requests_per_minute: %d\n", s.baseURL, s.requestsPerMinute)
		if s.addressFiles > 0 {
			if err := os.Mkdir(filepath.Join(dir, "addresses"), 0o700); err != nil {
				return err
			}
			if err := addAddressFiles(files, &cfg, s); err != nil {
				return err
			}
		} else {
			cfg.WriteString("addresses:\n")
			for _, e := range s.emails {
				fmt.Fprintf(&cfg, "  - %q\n", e)
			}
		}
		cfg.WriteString("webhook:\n  secret_files: [secret]\n")
	} else {
		cfg.WriteString("accounts:\n")
		account := func(name, tokenFile, secretFile string, emails []string) {
			fmt.Fprintf(&cfg, "  - name: %s\n    api: {base_url: %q, token_file: %s, requests_per_minute: %d}\n    webhook: {secret_files: [%s]}\n    addresses:\n", name, s.baseURL, tokenFile, s.requestsPerMinute, secretFile)
			for _, e := range emails {
				fmt.Fprintf(&cfg, "      - %q\n", e)
			}
		}
		for i, secret := range s.otherAccounts {
			name := fmt.Sprintf("a%d", i)
			files["secret-"+name] = secret
			files["token-"+name] = []byte("svc_ak_bench_other_" + name)
			account(name, "token-"+name, "secret-"+name, []string{name + "@other.bench.example"})
		}
		account("last", "token", "secret", s.emails)
	}
	files["config.yml"] = []byte(cfg.String())
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// addAddressFiles spreads s.emails over s.addressFiles files, plain or
// file_sd-shaped (s.ownerLabels), and points the config at them.
func addAddressFiles(files map[string][]byte, cfg *strings.Builder, s exporterSetup) error {
	if !s.ownerLabels {
		lists := make([]strings.Builder, s.addressFiles)
		for i, e := range s.emails {
			fmt.Fprintln(&lists[i%s.addressFiles], e)
		}
		for i := range lists {
			files[AddressFileName(i)] = []byte(lists[i].String())
		}
		cfg.WriteString("addresses_files: [addresses/*.txt]\n")
		return nil
	}
	groups := make([][]sdGroup, s.addressFiles)
	for i, e := range s.emails {
		groups[i%s.addressFiles] = append(groups[i%s.addressFiles], ownerGroup(i, e, ""))
	}
	for i, g := range groups {
		data, err := json.Marshal(g)
		if err != nil {
			return err
		}
		files[sdFileName(i)] = data
	}
	cfg.WriteString("addresses_sd_files: [addresses/*.json]\n")
	return nil
}

// AddressFileName is the i-th address file of an exporterSetup, relative
// to its directory.
func AddressFileName(i int) string { return filepath.Join("addresses", fmt.Sprintf("%02d.txt", i)) }

// sdFileName is the i-th file_sd-shaped address file of an exporterSetup
// with ownerLabels, relative to its directory.
func sdFileName(i int) string { return filepath.Join("addresses", fmt.Sprintf("%02d.json", i)) }

// sdGroup is one group of a file_sd-shaped address file.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// ownerGroup is the i-th address's group in the owner-labelled files: a
// group of its own (the most a file can hold, every address a label set),
// the default owner_labels, one of 100 teams (team, when not empty) and an
// owner of its own.
func ownerGroup(i int, email, team string) sdGroup {
	return sdGroup{Targets: []string{email}, Labels: map[string]string{
		"team": cmp.Or(team, fmt.Sprintf("team%02d", i%100)), "owner": fmt.Sprintf("owner%06d", i),
	}}
}

func (r *runningExporter) close() {
	r.exp.Close()
	os.RemoveAll(r.dir)
}

// run starts the exporter's Run; the function it returns stops it and waits.
func (r *runningExporter) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		r.exp.Run(ctx)
	}()
	return func() {
		cancel()
		<-ran
	}
}

// productionLogger formats every line the way main's default logger does
// (logfmt, info level, timestamp and caller) and throws it away, so log
// formatting is part of what is measured but the terminal is not.
func productionLogger() log.Logger {
	logger := log.NewLogfmtLogger(log.NewSyncWriter(io.Discard))
	logger = level.NewFilter(logger, level.AllowInfo())
	return log.With(logger, "ts", log.DefaultTimestampUTC, "caller", log.DefaultCaller)
}

// sampleValue scrapes h and finds the value of the gauge or counter sample
// of family name whose labels include all of want; ok is false when there
// is none.
func sampleValue(h http.Handler, name string, want map[string]string) (value float64, ok bool, err error) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, scrapeRequest())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		return 0, false, err
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matched := 0
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
					matched++
				}
			}
			if matched == len(want) {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}
