// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Limits of the file's values. The defaults are in config.go; limits that
// are not settings (response caps) are in limits.go.
const (
	// MaxRequestsPerMinute is the service's limit per key (spec section 8).
	MaxRequestsPerMinute = 60
	// MaxWebhookBodyBytes is the largest webhook.max_body_bytes; the
	// journal caps one record at it.
	MaxWebhookBodyBytes = 16 << 20
	// Bounds the replay cache's memory: roughly 100 bytes per entry.
	maxDedupEntries = 10_000_000
	// Discovered addresses share the budget with configured ones; beyond
	// this many a round takes days.
	maxDiscoveredAddresses = 100_000
)

// Validate checks the whole configuration and returns every problem found,
// each naming its field path and bad value.
func (c *Config) Validate() error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}

	c.API.validate(fail)
	c.validateAccounts(fail)

	if c.Refresh.Interval <= 0 {
		fail("refresh.interval: %s must be greater than 0", c.Refresh.Interval)
	}
	if c.Refresh.MeInterval <= 0 {
		fail("refresh.me_interval: %s must be greater than 0", c.Refresh.MeInterval)
	}
	if c.Refresh.FilesInterval <= 0 {
		fail("refresh.files_interval: %s must be greater than 0", c.Refresh.FilesInterval)
	}

	if !slices.Contains(breach.LabelModes, c.Labels.Address) {
		fail("labels.address: %q must be one of %s, %s, %s, %s", echo(c.Labels.Address), breach.LabelEmail, breach.LabelAlias, breach.LabelHash, breach.LabelHMAC)
	}
	c.Labels.validateKeyFile(fail)
	c.validateOwnerLabels(fail)

	c.Webhook.validate(fail)
	c.Metrics.validate(fail)
	c.Store.validate(fail)

	return errors.Join(errs...)
}

// validate checks the API settings every account shares; each account's
// key and budget are checked with it (validateAccounts).
func (c *APIConfig) validate(fail func(string, ...any)) {
	if c.Timeout <= 0 {
		fail("api.timeout: %s must be greater than 0", c.Timeout)
	}
	if err := c.TLSConfig.Validate(); err != nil {
		fail("api.tls_config: %w", err)
	}
	// The proxy settings are inlined, so their keys sit directly under api.
	if err := c.ProxyConfig.Validate(); err != nil {
		fail("api: %w", err)
	}
}

// checkBaseURL's errors show the URL redacted: a password in it must not
// reach a log.
func checkBaseURL(raw string) error {
	u, shown, err := parseURL(raw)
	switch {
	case err != nil:
		return err
	case u.User != nil:
		return fmt.Errorf("%q must not contain credentials; the token goes in api.token_file", shown)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q must not have a query or fragment", shown)
	}
	return nil
}

// validateAddresses checks every account's addresses: valid, each in one
// place only (case-insensitive, as the service compares them; the same
// address in two accounts names both), and their aliases.
func (c *Config) validateAddresses(fail func(string, ...any)) {
	type place struct {
		account string
		path    string
	}
	first := map[string]place{} // lower-cased email -> where it first is
	aliasIndex := map[string]string{}
	for ai, acct := range c.AccountsInForce() {
		prefix := c.accountPath(ai)
		for i, a := range acct.Addresses {
			path := fmt.Sprintf("%saddresses[%d]", prefix, i)
			switch {
			case a.Email == "":
				fail("%s: email is required", path)
			case !breach.ValidEmail(a.Email):
				fail("%s: %sis not a valid email address", path, c.quoteAddress(a.Email))
			default:
				key := breach.Key(a.Email)
				p, seen := first[key]
				switch {
				case !seen:
					first[key] = place{acct.Name, path}
				case p.account != acct.Name:
					fail("%s: %sis in accounts %q (%s) and %q: an address belongs to one account", path, c.quoteAddress(a.Email), p.account, p.path, acct.Name)
				default:
					fail("%s: %sduplicates %s", path, c.quoteAddress(a.Email), p.path)
				}
			}
			c.validateAddressLabels(path, a.Labels, fail)
			if c.Labels.Address != breach.LabelAlias {
				continue
			}
			switch {
			case a.Alias == "":
				fail("%s.alias: is required when labels.address is %s", path, breach.LabelAlias)
			case !utf8.ValidString(a.Alias):
				fail("%s.alias: %q is not valid UTF-8", path, echo(a.Alias))
			case strings.HasPrefix(a.Alias, breach.HashPrefix), strings.HasPrefix(a.Alias, breach.HMACPrefix):
				// Discovered addresses without an alias are labelled with
				// HashLabel or HMACLabel; an alias must not be mistaken for one.
				fail("%s.alias: %q must not start with %q or %q", path, echo(a.Alias), breach.HashPrefix, breach.HMACPrefix)
			default:
				checkAliasUnique(aliasIndex, path, a.Alias, fail)
			}
		}
	}
}

// quoteAddress is how a validation error shows an address, followed by a
// space: quoted in email mode, where every label shows it anyway, and not
// at all in the other modes, whose logs must not (the index names it).
func (c *Config) quoteAddress(email string) string {
	if !c.Labels.ShowsAddresses() {
		return ""
	}
	return fmt.Sprintf("%q ", echo(email))
}

// checkAliasUnique fails when alias, as a label (cut to the label cap),
// equals an earlier one: two series would then be the same.
func checkAliasUnique(seen map[string]string, path, alias string, fail func(string, ...any)) {
	label := breach.LabelValue(alias, breach.MaxAddressBytes)
	other, dup := seen[label]
	switch {
	case !dup:
		seen[label] = path
	case label == alias:
		fail("%s.alias: %q duplicates %s.alias", path, echo(alias), other)
	default:
		fail("%s.alias: equals %s.alias in its first %d bytes, all a label keeps: make them differ there", path, other, breach.MaxAddressBytes)
	}
}

// validateGlobs checks an account's addresses_files or addresses_sd_files
// (path is the key: "addresses_files" at the top level,
// "accounts[i].addresses_files" in the list): valid patterns,
// each once, with wildcards only in the last element, since the watcher
// watches each glob's directory (as Prometheus's file_sd requires).
func validateGlobs(path string, globs []string, fail func(string, ...any)) {
	firstIndex := map[string]int{}
	for i, g := range globs {
		if j, seen := firstIndex[g]; seen {
			fail("%s[%d]: %q duplicates %s[%d]", path, i, echo(g), path, j)
			continue
		}
		firstIndex[g] = i
		switch _, err := filepath.Match(g, ""); {
		case g == "":
			fail("%s[%d]: empty path", path, i)
		case err != nil:
			fail("%s[%d]: %q is not a valid glob: %w", path, i, echo(g), err)
		case strings.ContainsAny(filepath.Dir(g), `*?[\`):
			fail("%s[%d]: %q: wildcards only in the file name, not in the directory", path, i, echo(g))
		}
	}
}

// ShowsAddresses reports whether the labels show addresses (email mode):
// only then may a log or an error show one.
func (l *LabelsConfig) ShowsAddresses() bool { return l.Address == breach.LabelEmail }

// validateKeyFile: hmac labels need their key; alias labels may use it for
// addresses without an alias; the other modes would ignore it, which must
// not pass for protection.
func (l *LabelsConfig) validateKeyFile(fail func(string, ...any)) {
	switch {
	case l.Address == breach.LabelHMAC && l.AddressKeyFile == "":
		fail("labels.address_key_file: is required when labels.address is %s", breach.LabelHMAC)
	case l.AddressKeyFile != "" && l.Address != breach.LabelHMAC && l.Address != breach.LabelAlias:
		fail("labels.address_key_file: is only used when labels.address is %s or %s, not %s", breach.LabelHMAC, breach.LabelAlias, l.Address)
	}
}

// validateSecretFiles checks the webhook.secret_files of the account at
// path (accountPath).
func validateSecretFiles(path string, files []string, fail func(string, ...any)) {
	firstIndex := map[string]int{}
	for i, f := range files {
		if f == "" {
			fail("%swebhook.secret_files[%d]: empty path", path, i)
			continue
		}
		if j, seen := firstIndex[f]; seen {
			fail("%swebhook.secret_files[%d]: %q duplicates %swebhook.secret_files[%d]", path, i, echo(f), path, j)
		} else {
			firstIndex[f] = i
		}
	}
}

func (w *WebhookConfig) validate(fail func(string, ...any)) {
	if w.MaxBodyBytes < 1 || w.MaxBodyBytes > MaxWebhookBodyBytes {
		fail("webhook.max_body_bytes: %d is out of range 1..%d", w.MaxBodyBytes, MaxWebhookBodyBytes)
	}
	if w.DedupWindow <= 0 {
		fail("webhook.dedup_window: %s must be greater than 0", w.DedupWindow)
	}
	if w.DedupMaxEntries < 1 || w.DedupMaxEntries > maxDedupEntries {
		fail("webhook.dedup_max_entries: %d is out of range 1..%d", w.DedupMaxEntries, maxDedupEntries)
	}
	if w.MaxDiscoveredAddresses < 1 || w.MaxDiscoveredAddresses > maxDiscoveredAddresses {
		fail("webhook.max_discovered_addresses: %d is out of range 1..%d (discover_addresses: false turns discovery off)", w.MaxDiscoveredAddresses, maxDiscoveredAddresses)
	}
	if w.MaxEventAge < 0 {
		fail("webhook.max_event_age: %s must not be negative (0 turns the check off)", w.MaxEventAge)
	}
}
