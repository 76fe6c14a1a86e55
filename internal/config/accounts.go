// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"regexp"

	"github.com/prometheus/common/config"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Account is one entry of accounts: an API key with its own budget, the
// webhook secrets that vouch for its alerts, and its addresses. A file
// without accounts has one, breach.DefaultAccount, made of the top-level
// api (base_url, token_file, requests_per_minute), webhook.secret_files,
// addresses and addresses_files (AccountsInForce).
type Account struct {
	Name      string         `yaml:"name"`
	API       AccountAPI     `yaml:"api"`
	Webhook   AccountWebhook `yaml:"webhook"`
	Addresses []Address      `yaml:"addresses"`
	// AddressesFiles are globs of files listing more addresses of the
	// account (read by the address files' code, not by Load).
	AddressesFiles []AddressFiles `yaml:"addresses_files"`
	// AddressesSDFiles are globs of files in file_sd shape: more
	// addresses of the account, with their owner labels.
	AddressesSDFiles []string `yaml:"addresses_sd_files"`
	// AddressesHTTP are URLs answering more addresses of the account, with
	// their owner labels, in Prometheus' http_sd shape.
	AddressesHTTP []AddressesHTTP `yaml:"addresses_http"`
}

// AccountAPI is an account's key and budget. The API's timeout, TLS and
// proxy settings stay under the top-level api, for every account.
type AccountAPI struct {
	BaseURL           string `yaml:"base_url"`
	TokenFile         string `yaml:"token_file"`
	RequestsPerMinute int    `yaml:"requests_per_minute"`
}

// AccountWebhook is an account's webhook secrets: an alert belongs to the
// account whose secret verifies it.
type AccountWebhook struct {
	SecretFiles []string `yaml:"secret_files"`
}

// MaxAccounts bounds the accounts list: each is a scheduler, a label value
// on every per-key series and one more HMAC per unsigned webhook request.
const MaxAccounts = 100

// accountName is what a name may be: a short label value, and a word in a
// file path or a Kubernetes Secret's name.
var accountName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// singleAccountKeys are the top-level keys that make the single-account
// shape; with an accounts list they belong in each entry.
var singleAccountKeys = []string{"api.base_url", "api.token_file", "api.requests_per_minute", "addresses", "addresses_files", "addresses_sd_files", "addresses_http", "webhook.secret_files"}

// Single reports whether the file has the single-account shape: no
// accounts list.
func (c *Config) Single() bool { return len(c.Accounts) == 0 }

// AccountsInForce returns the accounts the file configures: its accounts
// list, or the one DefaultAccount of the single-account shape.
func (c *Config) AccountsInForce() []Account {
	if !c.Single() {
		return c.Accounts
	}
	return []Account{{
		Name:             breach.DefaultAccount,
		API:              AccountAPI{BaseURL: c.API.BaseURL, TokenFile: c.API.TokenFile, RequestsPerMinute: c.API.RequestsPerMinute},
		Webhook:          AccountWebhook{SecretFiles: c.Webhook.SecretFiles},
		Addresses:        c.Addresses,
		AddressesFiles:   c.AddressesFiles,
		AddressesSDFiles: c.AddressesSDFiles,
		AddressesHTTP:    c.AddressesHTTP,
	}}
}

// AccountNames are the names of the accounts in force, in file order.
func (c *Config) AccountNames() []string {
	accounts := c.AccountsInForce()
	names := make([]string, len(accounts))
	for i, a := range accounts {
		names[i] = a.Name
	}
	return names
}

// path is where the account's settings are in the file: at the top level
// for the single-account shape, under accounts[i] otherwise.
func (c *Config) accountPath(i int) string {
	if c.Single() {
		return ""
	}
	return fmt.Sprintf("accounts[%d].", i)
}

// completeAccounts gives each entry of accounts the default budget where
// the file sets none (lines says which keys it has: a 0 written is an
// error, not a default), and reports top-level keys of the single-account
// shape beside an accounts list, each at its line.
func (c *Config) completeAccounts(lines lineIndex) Problems {
	if c.Single() {
		return nil
	}
	var problems Problems
	for _, key := range singleAccountKeys {
		if line, set := lines[key]; set {
			problems = append(problems, Problem{Line: line, Msg: fmt.Sprintf("%s: not with accounts: each entry of accounts has its own (the top-level form is the single-account shape)", key)})
		}
	}
	for i := range c.Accounts {
		if _, set := lines[fmt.Sprintf("accounts[%d].api.requests_per_minute", i)]; !set {
			c.Accounts[i].API.RequestsPerMinute = DefaultRequestsPerMinute
		}
	}
	return problems
}

// validateAccounts checks the accounts list's names, each account's key
// and budget, and every address of every account (duplicates across
// accounts name both).
func (c *Config) validateAccounts(fail func(string, ...any)) {
	if len(c.Accounts) > MaxAccounts {
		fail("accounts: %d entries, at most %d", len(c.Accounts), MaxAccounts)
	}
	names := map[string]int{}
	urls := map[string]string{} // addresses_http, in every account
	for i, a := range c.Accounts {
		switch j, dup := names[a.Name]; {
		case !accountName.MatchString(a.Name):
			fail("accounts[%d].name: %q must be 1 to 32 of a-z, 0-9, _ and -", i, echo(a.Name))
		case dup:
			fail("accounts[%d].name: %q duplicates accounts[%d].name", i, a.Name, j)
		default:
			names[a.Name] = i
		}
	}
	for i, a := range c.AccountsInForce() {
		a.API.validate(c.accountPath(i), fail)
		validateSecretFiles(c.accountPath(i), a.Webhook.SecretFiles, fail)
		validateGlobs(c.accountPath(i)+"addresses_files", Globs(a.AddressesFiles), fail)
		for j, g := range a.AddressesFiles {
			c.validateAddressLabels(fmt.Sprintf("%saddresses_files[%d]", c.accountPath(i), j), g.Labels, fail)
		}
		validateGlobs(c.accountPath(i)+"addresses_sd_files", a.AddressesSDFiles, fail)
		validateAddressesHTTP(c.accountPath(i)+"addresses_http", a.AddressesHTTP, urls, fail)
	}
	c.validateAddresses(fail)
}

func (a *AccountAPI) validate(path string, fail func(string, ...any)) {
	if a.BaseURL == "" {
		fail("%sapi.base_url: is required", path)
	} else if err := checkBaseURL(a.BaseURL); err != nil {
		fail("%sapi.base_url: %w", path, err)
	}
	if a.RequestsPerMinute < 1 || a.RequestsPerMinute > MaxRequestsPerMinute {
		fail("%sapi.requests_per_minute: %d is out of range 1..%d", path, a.RequestsPerMinute, MaxRequestsPerMinute)
	}
}

// setDirectory makes the account's relative paths relative to dir.
func (a *Account) setDirectory(dir string) {
	a.API.TokenFile = config.JoinDir(dir, a.API.TokenFile)
	for i, f := range a.Webhook.SecretFiles {
		a.Webhook.SecretFiles[i] = config.JoinDir(dir, f)
	}
	joinGlobs(dir, a.AddressesFiles)
	joinDir(dir, a.AddressesSDFiles)
	for i := range a.AddressesHTTP {
		a.AddressesHTTP[i].setDirectory(dir)
	}
}
