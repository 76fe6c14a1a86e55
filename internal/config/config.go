// Package config loads and checks breach_exporter's YAML configuration file.
//
// Parsing is strict: an unknown key is an error that names it. Every
// validation error names the field path and the offending value, and no
// error ever contains a secret (the API token and webhook secrets are only
// read on demand by ReadToken and ReadSecrets, never by Load).
//
// Relative file paths (api.token_file, webhook.secret_files and the files of
// api.tls_config) are relative to the directory of the configuration file,
// as in Prometheus, so a config keeps working whatever the working directory
// of the process is. Load resolves them; Parse, which has no file, leaves
// them relative to the working directory.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Environment variables read when the corresponding file setting is empty.
const (
	TokenEnv         = "BREACH_EXPORTER_API_TOKEN"
	WebhookSecretEnv = "BREACH_EXPORTER_WEBHOOK_SECRET"
)

// Config is the whole configuration file.
type Config struct {
	API       APIConfig     `yaml:"api"`
	Refresh   RefreshConfig `yaml:"refresh"`
	Addresses []Address     `yaml:"addresses"`
	Labels    LabelsConfig  `yaml:"labels"`
	Webhook   WebhookConfig `yaml:"webhook"`
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
}

// Address is one monitored email address. In YAML it is either a plain
// string (the email) or a mapping {email: ..., alias: ...}.
type Address struct {
	Email string `yaml:"email"`
	Alias string `yaml:"alias"`
}

// LabelsConfig says what goes into the address label.
type LabelsConfig struct {
	Address breach.LabelMode `yaml:"address"`
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
	}
}

func defaultLabels() LabelsConfig {
	return LabelsConfig{Address: breach.LabelEmail}
}

func defaultWebhook() WebhookConfig {
	return WebhookConfig{
		MaxBodyBytes:    64 << 10,
		DedupWindow:     model.Duration(24 * time.Hour),
		DedupMaxEntries: 100000,
		// Each discovered address costs a share of the request budget and
		// about 60 series; a thousand is far more than alerts about an
		// account's own addresses should ever reveal.
		MaxDiscoveredAddresses: 1000,
	}
}

// Load reads, strictly parses, completes with defaults and validates the
// file at path, and makes its relative file paths relative to the file's
// directory. It does not read the token or the webhook secrets.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.setDirectory(filepath.Dir(path))
	return c, nil
}

// Parse is Load without the file: strict parse, defaults, validation.
// Relative paths are left as they are.
func Parse(data []byte) (*Config, error) {
	c := &Config{
		API:     defaultAPI(),
		Refresh: defaultRefresh(),
		Labels:  defaultLabels(),
		Webhook: defaultWebhook(),
	}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, readableYAMLError(err)
	}
	// "refresh:" with nothing under it decodes as null, which zeroes the
	// section; treat it like an absent section rather than as zero values.
	resetIfZero(&c.API, defaultAPI())
	resetIfZero(&c.Refresh, defaultRefresh())
	resetIfZero(&c.Labels, defaultLabels())
	resetIfZero(&c.Webhook, defaultWebhook())
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func resetIfZero[T any](section *T, defaults T) {
	if reflect.ValueOf(section).Elem().IsZero() {
		*section = defaults
	}
}

func (c *Config) setDirectory(dir string) {
	c.API.TokenFile = config.JoinDir(dir, c.API.TokenFile)
	c.API.TLSConfig.SetDirectory(dir)
	for i, f := range c.Webhook.SecretFiles {
		c.Webhook.SecretFiles[i] = config.JoinDir(dir, f)
	}
}

// UnmarshalYAML names the key of a bad value inside api.
func (c *APIConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type api APIConfig // yaml names this type when the node is not a mapping
	return decodeSection(unmarshal, "api", (*api)(c))
}

// UnmarshalYAML names the key of a bad value inside refresh.
func (c *RefreshConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type refresh RefreshConfig
	return decodeSection(unmarshal, "refresh", (*refresh)(c))
}

// UnmarshalYAML names the key of a bad value inside webhook.
func (c *WebhookConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type webhook WebhookConfig
	return decodeSection(unmarshal, "webhook", (*webhook)(c))
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

// decodeSection decodes one mapping into out, a pointer to a struct. yaml
// reports structural problems (unknown key, wrong kind of node) with a line
// number and the key, but an error raised by a value's own unmarshaler (a
// bad duration, URL or TLS setting) comes back bare. For those, decode the
// keys one at a time to find the one that fails, and name it.
func decodeSection(unmarshal func(any) error, section string, out any) error {
	// The keys are read first: after a failed decode yaml's state still
	// holds that decode's errors and would report them again.
	var keys yaml.MapSlice
	if err := unmarshal(&keys); err != nil {
		keys = nil // not a mapping: the decode below says so with a line number
	}
	err := unmarshal(out)
	if err == nil || isStructural(err) {
		return err
	}
	for _, item := range keys {
		single, mErr := yaml.Marshal(yaml.MapSlice{item})
		if mErr != nil {
			continue
		}
		probe := reflect.New(reflect.TypeOf(out).Elem()).Interface()
		if pErr := yaml.UnmarshalStrict(single, probe); pErr != nil && !isStructural(pErr) {
			return fmt.Errorf("%s.%v: %w", section, item.Key, err)
		}
	}
	return fmt.Errorf("%s: %w", section, err)
}

func isStructural(err error) bool {
	var typeErr *yaml.TypeError
	return errors.As(err, &typeErr)
}

// yaml's messages name Go types, which mean nothing to whoever edits the
// file; say it in the file's terms instead.
var yamlMessageRewrites = []struct {
	pattern *regexp.Regexp
	replace string
}{
	{regexp.MustCompile(`field (\S+) not found in type \S+`), `unknown key "$1"`},
	{regexp.MustCompile(`field (\S+) already set in type \S+`), `duplicate key "$1"`},
	{regexp.MustCompile(` into config\.(\w+)$`), ` into $1`},
}

func readableYAMLError(err error) error {
	var typeErr *yaml.TypeError
	if !errors.As(err, &typeErr) {
		return err
	}
	for i, msg := range typeErr.Errors {
		for _, r := range yamlMessageRewrites {
			msg = r.pattern.ReplaceAllString(msg, r.replace)
		}
		typeErr.Errors[i] = msg
	}
	return typeErr
}
