// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

const tokenPrefix = "svc_ak_"

// ReadToken reads the API token from api.token_file, or from the
// BREACH_EXPORTER_API_TOKEN environment variable when no file is set, and
// checks it has the svc_ak_<token> form. It is meant to be called again on
// reload and after a 401, so a rotated token is picked up without a restart.
// Errors say where the token came from and what form is expected, never
// what the token was.
func (c *APIConfig) ReadToken() (string, error) { return readToken("", c.TokenFile, true) }

// readToken is ReadToken for the account at path (accountPath), whose
// token is in file; env allows the environment variable (the
// single-account shape only: it names one token).
func readToken(path, file string, env bool) (string, error) {
	var raw, source string
	switch {
	case file != "":
		data, err := fileread.Read(file, fileread.MaxSecretBytes)
		if err != nil {
			return "", fmt.Errorf("%sapi.token_file: %w", path, err)
		}
		raw, source = string(data), fmt.Sprintf("%sapi.token_file %q", path, echo(file))
	case !env:
		return "", fmt.Errorf("%sapi.token_file: is required", path)
	default:
		var set bool
		raw, set = os.LookupEnv(TokenEnv)
		if !set {
			return "", fmt.Errorf("no API token: set api.token_file or the %s environment variable", TokenEnv)
		}
		source = "environment variable " + TokenEnv
	}
	token := strings.TrimSpace(raw)
	if token == "" {
		return "", fmt.Errorf("%s: the API token is empty", source)
	}
	if !validToken(token) {
		return "", fmt.Errorf("%s: the API token must have the form %s<token>, where <token> is one or more visible ASCII characters (no spaces); issue one from the dashboard settings page", source, tokenPrefix)
	}
	return token, nil
}

func validToken(token string) bool {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '!' || rest[i] > '~' {
			return false
		}
	}
	return true
}

// MinWebhookSecretBytes is the shortest webhook secret taken: an HMAC key
// shorter than 128 bits could be guessed by whoever sees signed bodies.
const MinWebhookSecretBytes = 16

// ReadLabelKey reads the key of labels.address_key_file; nil when none is
// set. Trailing whitespace (the newline an editor adds) is not part of it,
// as for the webhook secrets. It is read on every load, so a reload picks up
// a new key (and every hmac label changes with it).
func (l *LabelsConfig) ReadLabelKey() ([]byte, error) {
	if l.AddressKeyFile == "" {
		return nil, nil
	}
	data, err := fileread.Read(l.AddressKeyFile, fileread.MaxSecretBytes)
	if err != nil {
		return nil, fmt.Errorf("labels.address_key_file: %w", err)
	}
	key := trimTrailingSpace(data)
	if len(key) < breach.MinLabelKeyBytes {
		return nil, fmt.Errorf("labels.address_key_file: %q holds %d bytes, want at least %d (e.g. the output of openssl rand -hex 32)", echo(l.AddressKeyFile), len(key), breach.MinLabelKeyBytes)
	}
	return key, nil
}

// ReadSecrets reads every webhook secret, in the order of
// webhook.secret_files, or the single secret in the
// BREACH_EXPORTER_WEBHOOK_SECRET environment variable when no file is set.
// Trailing whitespace (the newline an editor adds) is not part of a secret.
// An empty, unreadable or too short secret (MinWebhookSecretBytes) is an
// error naming where it came from (all of them, not only the first); no
// secret configured at all returns (nil, nil), and the caller decides
// whether the receiver can run without one (it cannot).
func (c *WebhookConfig) ReadSecrets() ([][]byte, error) { return readSecrets("", c.SecretFiles, true) }

// readSecrets is ReadSecrets for the account at path (accountPath), whose
// secrets are in files; env allows the environment variable (the
// single-account shape only: it names one secret).
func readSecrets(path string, files []string, env bool) ([][]byte, error) {
	if len(files) == 0 && !env {
		return nil, nil
	}
	if len(files) == 0 {
		raw, set := os.LookupEnv(WebhookSecretEnv)
		if !set {
			return nil, nil
		}
		secret := trimTrailingSpace([]byte(raw))
		if len(secret) == 0 {
			return nil, fmt.Errorf("environment variable %s: the webhook secret is empty", WebhookSecretEnv)
		}
		if err := checkSecretLength(secret); err != nil {
			return nil, fmt.Errorf("environment variable %s: %w", WebhookSecretEnv, err)
		}
		return [][]byte{secret}, nil
	}
	secrets := make([][]byte, 0, len(files))
	var errs []error
	for i, f := range files {
		data, err := fileread.Read(f, fileread.MaxSecretBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%swebhook.secret_files[%d]: %w", path, i, err))
			continue
		}
		secret := trimTrailingSpace(data)
		if len(secret) == 0 {
			errs = append(errs, fmt.Errorf("%swebhook.secret_files[%d]: %q is empty", path, i, echo(f)))
			continue
		}
		if err := checkSecretLength(secret); err != nil {
			errs = append(errs, fmt.Errorf("%swebhook.secret_files[%d]: %q: %w", path, i, echo(f), err))
			continue
		}
		secrets = append(secrets, secret)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return secrets, nil
}

// checkSecretLength refuses a webhook secret too short to be an HMAC key.
func checkSecretLength(secret []byte) error {
	if len(secret) < MinWebhookSecretBytes {
		return fmt.Errorf("the webhook secret has %d bytes, want at least %d: generate a new one in the dashboard", len(secret), MinWebhookSecretBytes)
	}
	return nil
}

func trimTrailingSpace(b []byte) []byte {
	return bytes.TrimRightFunc(b, unicode.IsSpace)
}
