// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// accountEntry is one further account of --accounts.file: its key, plan,
// addresses and webhook secret, the flags' first account's counterparts.
// Files it names are relative to the accounts file's folder.
type accountEntry struct {
	Token             string        `yaml:"token"`
	TokenFile         string        `yaml:"token_file"`
	Plan              string        `yaml:"plan"`
	Addresses         []sim.Address `yaml:"addresses"`
	AddressesFile     string        `yaml:"addresses_file"`
	WebhookSecretFile string        `yaml:"webhook_secret_file"`
}

// readAccounts reads --accounts.file: the accounts served next to the
// flags' one. Unknown keys are errors, as in the addresses file.
func readAccounts(path string) ([]sim.Account, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --accounts.file: %w", err)
	}
	var entries []accountEntry
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--accounts.file %s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("--accounts.file %s lists no account", path)
	}
	dir := filepath.Dir(path)
	accounts := make([]sim.Account, 0, len(entries))
	for i, e := range entries {
		a, err := e.account(dir)
		if err != nil {
			// Accounts count from 2: the flags' account is the first.
			return nil, fmt.Errorf("--accounts.file %s: account %d: %w", path, i+2, err)
		}
		accounts = append(accounts, a)
	}
	return accounts, nil
}

func (e accountEntry) account(dir string) (sim.Account, error) {
	a := sim.Account{Token: e.Token, Plan: e.Plan, Addresses: e.Addresses}
	if a.Plan == "" {
		a.Plan = "pro"
	}
	switch {
	case e.Token != "" && e.TokenFile != "":
		return a, errors.New("token and token_file are mutually exclusive")
	case e.TokenFile != "":
		var err error
		if a.Token, err = readToken("token_file", inDir(dir, e.TokenFile)); err != nil {
			return a, err
		}
	case e.Token == "":
		return a, errors.New("token or token_file is required")
	}
	switch {
	case e.Addresses != nil && e.AddressesFile != "":
		return a, errors.New("addresses and addresses_file are mutually exclusive")
	case e.AddressesFile != "":
		var err error
		if a.Addresses, err = readAddresses("addresses_file", inDir(dir, e.AddressesFile)); err != nil {
			return a, err
		}
	case len(e.Addresses) == 0:
		// Not the built-in set: it is the first account's by default.
		return a, errors.New("addresses or addresses_file is required")
	}
	if e.WebhookSecretFile != "" {
		var err error
		if a.WebhookSecret, err = readSecret("webhook_secret_file", inDir(dir, e.WebhookSecretFile)); err != nil {
			return a, err
		}
	}
	return a, nil
}

func inDir(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// readToken reads an API key file (what names it: the flag or key),
// whitespace trimmed.
func readToken(what, path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", what, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// readAddresses reads an addresses file (what names it: the flag or key).
func readAddresses(what, path string) ([]sim.Address, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	addrs, err := sim.ParseAddresses(data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return addrs, nil
}

// readSecret reads a webhook secret file. Trailing whitespace only, as the
// exporter reads its secret files: a file saved with a newline must still
// yield matching signatures.
func readSecret(what, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	secret := bytes.TrimRightFunc(data, unicode.IsSpace)
	if len(secret) == 0 {
		return nil, fmt.Errorf("%s %s is empty", what, path)
	}
	return secret, nil
}
