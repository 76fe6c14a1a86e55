// SPDX-License-Identifier: Apache-2.0

// Package config loads and checks breach_exporter's YAML configuration file.
//
// Parsing is strict: an unknown key is an error that names it. Every
// validation error names the field path and the offending value, and no
// error ever contains a secret (the API token, the label key and webhook
// secrets are only read on demand by ReadToken, ReadLabelKey and
// ReadSecrets, never by Load).
//
// Relative file paths (api.token_file, labels.address_key_file,
// webhook.secret_files, acknowledgements_file, addresses_files,
// addresses_sd_files, the files of addresses_http,
// store.password_file and the files of api.tls_config) are relative to the directory of the configuration file,
// as in Prometheus, so a config keeps working whatever the working directory
// of the process is. Load resolves them; Parse, which has no file, leaves
// them relative to the working directory.
package config

import (
	"path/filepath"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// Environment variables read when the corresponding file setting is empty.
const (
	TokenEnv         = "BREACH_EXPORTER_API_TOKEN"
	WebhookSecretEnv = "BREACH_EXPORTER_WEBHOOK_SECRET"
)

// Config is the whole configuration file.
type Config struct {
	API APIConfig `yaml:"api"`
	// Accounts are the accounts of a file with several (accounts.go);
	// empty, the top-level api, addresses, addresses_files and
	// webhook.secret_files are the one account breach.DefaultAccount.
	Accounts  []Account     `yaml:"accounts"`
	Refresh   RefreshConfig `yaml:"refresh"`
	Addresses []Address     `yaml:"addresses"`
	// AddressesFiles are the single-account shape's globs of address
	// files (internal/addrfile): more addresses, read at start, on a
	// change and every refresh.files_interval. A glob's wildcards are in
	// its last element.
	AddressesFiles []AddressFiles `yaml:"addresses_files"`
	// AddressesSDFiles are the single-account shape's globs of files in
	// Prometheus' file_sd shape: addresses with their owner labels,
	// read as the address files are.
	AddressesSDFiles []string `yaml:"addresses_sd_files"`
	// AddressesHTTP are the single-account shape's URLs answering
	// addresses with their owner labels in Prometheus' http_sd shape
	// (addresseshttp.go).
	AddressesHTTP []AddressesHTTP `yaml:"addresses_http"`
	// OwnerLabels are the label names an address may carry (the config's
	// addresses[].labels, the groups of addresses_sd_files): each one a
	// label of breach_address_info, which the shipped rules join onto
	// every per-address alert.
	OwnerLabels []string      `yaml:"owner_labels"`
	Labels      LabelsConfig  `yaml:"labels"`
	Webhook     WebhookConfig `yaml:"webhook"`
	Metrics     MetricsConfig `yaml:"metrics"`
	// AcknowledgementsFile names the acknowledgements (internal/acknowledge):
	// the exposures people have handled. Empty means none.
	AcknowledgementsFile string `yaml:"acknowledgements_file"`
	// Store is the Redis or Valkey the replicas share (store.go); nil
	// when the file has no store section: one exporter, alone.
	Store *StoreConfig `yaml:"store"`
}

// APIConfig says how to reach the breach monitoring service's API.
type APIConfig struct {
	BaseURL           string             `yaml:"base_url"`
	TokenFile         string             `yaml:"token_file"`
	RequestsPerMinute int                `yaml:"requests_per_minute"`
	Timeout           model.Duration     `yaml:"timeout"`
	TLSConfig         config.TLSConfig   `yaml:"tls_config"`
	ProxyConfig       config.ProxyConfig `yaml:",inline"`
}

// RefreshConfig says how often the poller re-reads what.
type RefreshConfig struct {
	Interval   model.Duration `yaml:"interval"`
	MeInterval model.Duration `yaml:"me_interval"`
	// FilesInterval is how often the address files are read again
	// without a change seen in their directories.
	FilesInterval model.Duration `yaml:"files_interval"`
}

// Address is one monitored email address. In YAML it is either a plain
// string (the email) or a mapping {email: ..., alias: ...}.
type Address struct {
	Email string `yaml:"email"`
	Alias string `yaml:"alias"`
	// Labels are its owner labels, names from owner_labels.
	Labels map[string]string `yaml:"labels"`
}

// LabelsConfig says what goes into the address label.
type LabelsConfig struct {
	Address breach.LabelMode `yaml:"address"`
	// AddressKeyFile holds the HMAC key of labels.address hmac (required
	// there), and of the labels of addresses without an alias in alias
	// mode (optional there: without it they are hashed without a key).
	AddressKeyFile string `yaml:"address_key_file"`
}

// WebhookConfig configures the embedded alert receiver.
type WebhookConfig struct {
	SecretFiles       []string       `yaml:"secret_files"`
	MaxBodyBytes      int64          `yaml:"max_body_bytes"`
	DedupWindow       model.Duration `yaml:"dedup_window"`
	DedupMaxEntries   int            `yaml:"dedup_max_entries"`
	MaxEventAge       model.Duration `yaml:"max_event_age"`
	DiscoverAddresses *bool          `yaml:"discover_addresses"`
	// MaxDiscoveredAddresses bounds discovery: past it, an alert for a new
	// address is still counted, without an address label.
	MaxDiscoveredAddresses int `yaml:"max_discovered_addresses"`
}

// Discover reports whether an alert for an address that is not configured
// should make the poller start reading it. Unset means yes.
func (w *WebhookConfig) Discover() bool {
	return w.DiscoverAddresses == nil || *w.DiscoverAddresses
}

// DiscoveryLimit is how many discovered addresses may be watched at once:
// 0 when discovery is off.
func (w *WebhookConfig) DiscoveryLimit() int {
	if !w.Discover() {
		return 0
	}
	return w.MaxDiscoveredAddresses
}

// DefaultRequestsPerMinute leaves 5 of the service's 60 a minute for humans
// using the same key.
const DefaultRequestsPerMinute = 55

func defaultAPI() APIConfig {
	return APIConfig{
		RequestsPerMinute: DefaultRequestsPerMinute,
		Timeout:           model.Duration(10 * time.Second),
	}
}

func defaultRefresh() RefreshConfig {
	return RefreshConfig{
		Interval:   model.Duration(15 * time.Minute),
		MeInterval: model.Duration(5 * time.Minute),
		// As Prometheus's file_sd: a missed change (a network file system
		// sends no events) shows within minutes.
		FilesInterval: model.Duration(5 * time.Minute),
	}
}

// DefaultOwnerLabels are owner_labels when the file sets none: the team
// that Alertmanager routes by, and the person in it.
func DefaultOwnerLabels() []string { return []string{"team", "owner"} }

func defaultLabels() LabelsConfig {
	return LabelsConfig{Address: breach.LabelEmail}
}

func defaultWebhook() WebhookConfig {
	return WebhookConfig{
		MaxBodyBytes:    64 << 10,
		DedupWindow:     model.Duration(24 * time.Hour),
		DedupMaxEntries: 100000,
		// Each discovered address costs a share of the request budget and
		// about 20 series by default; a thousand is far more than alerts about an
		// account's own addresses should ever reveal.
		MaxDiscoveredAddresses: 1000,
	}
}

// load reads, strictly parses, completes with defaults and validates the
// file at path, and makes its relative file paths relative to the file's
// directory: the first step of LoadBundle. It does not read the token or
// the webhook secrets. It returns the config as far as it decoded (nil
// when the file could not be read or parsed), the line of each field, and
// every problem, each naming the file and, where the file has it, the line.
func load(path string) (*Config, lineIndex, Problems) {
	data, err := fileread.Read(path, fileread.MaxConfigBytes)
	if err != nil {
		return nil, nil, Problems{{Msg: err.Error()}}
	}
	c, lines, problems := parse(data)
	if c != nil {
		c.setDirectory(filepath.Dir(path))
	}
	return c, lines, problems.place(path, lines)
}

func parse(data []byte) (*Config, lineIndex, Problems) {
	c := &Config{
		API:         defaultAPI(),
		Refresh:     defaultRefresh(),
		OwnerLabels: DefaultOwnerLabels(),
		Labels:      defaultLabels(),
		Webhook:     defaultWebhook(),
	}
	lines, problems := decode(data, c)
	if lines == nil {
		return nil, nil, problems // not YAML at all
	}
	problems = append(problems, c.completeAccounts(lines)...)
	c.completeStore(lines)
	return c, lines, append(problems, problemsOf(c.Validate())...)
}

func (c *Config) setDirectory(dir string) {
	c.API.TokenFile = config.JoinDir(dir, c.API.TokenFile)
	c.Labels.AddressKeyFile = config.JoinDir(dir, c.Labels.AddressKeyFile)
	c.API.TLSConfig.SetDirectory(dir)
	c.AcknowledgementsFile = config.JoinDir(dir, c.AcknowledgementsFile)
	for i, f := range c.Webhook.SecretFiles {
		c.Webhook.SecretFiles[i] = config.JoinDir(dir, f)
	}
	joinGlobs(dir, c.AddressesFiles)
	joinDir(dir, c.AddressesSDFiles)
	for i := range c.AddressesHTTP {
		c.AddressesHTTP[i].setDirectory(dir)
	}
	for i := range c.Accounts {
		c.Accounts[i].setDirectory(dir)
	}
	if c.Store != nil {
		c.Store.setDirectory(dir)
	}
}

// UnmarshalYAML accepts an address as a plain string or as {email, alias}.
func (a *Address) UnmarshalYAML(unmarshal func(any) error) error {
	var email string
	if err := unmarshal(&email); err == nil {
		*a = Address{Email: email}
		return nil
	}
	type address Address
	return unmarshal((*address)(a))
}

// joinDir makes each of paths relative to dir.
func joinDir(dir string, paths []string) {
	for i, p := range paths {
		paths[i] = config.JoinDir(dir, p)
	}
}
