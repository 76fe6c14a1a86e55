// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// readFiles reads the store section's files into b: the passwords and the
// TLS files, each through fileread (bounded, never blocking on a pipe).
// Its errors name the setting and the file, never the content.
func (s *StoreConfig) readFiles(b *Bundle) []error {
	if s == nil {
		return nil
	}
	var errs []error
	var err error
	if b.StorePassword, err = readStoreSecret("store.password_file", s.PasswordFile); err != nil {
		errs = append(errs, err)
	}
	if b.StoreSentinelPassword, err = readStoreSecret("store.sentinel_password_file", s.SentinelPasswordFile); err != nil {
		errs = append(errs, err)
	}
	if b.StoreTLS, err = s.TLS.read(); err != nil {
		errs = append(errs, err)
	}
	if b.StoreSigningKeys, err = readSigningKeys(s.SigningKeyFile); err != nil {
		errs = append(errs, err)
	}
	return errs
}

const (
	// maxSigningKeys: the key that signs and, while the file itself is
	// rotated, the one before it.
	maxSigningKeys = 2
	// minSigningKeyBytes keeps a shared signing key out of a guesser's
	// reach.
	minSigningKeyBytes = 16
)

// readSigningKeys reads store.signing_key_file: one or two non-empty
// lines, each a key (trailing whitespace aside); nil when path is empty.
func readSigningKeys(path string) ([][]byte, error) {
	const field = "store.signing_key_file"
	if path == "" {
		return nil, nil
	}
	data, err := fileread.Read(path, fileread.MaxSecretBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	var keys [][]byte
	for line := range bytes.Lines(data) {
		if key := trimTrailingSpace(line); len(key) > 0 {
			keys = append(keys, key)
		}
	}
	switch {
	case len(keys) == 0:
		return nil, fmt.Errorf("%s: %q is empty", field, echo(path))
	case len(keys) > maxSigningKeys:
		return nil, fmt.Errorf("%s: %q has %d keys, at most %d: the one that signs and the one before it", field, echo(path), len(keys), maxSigningKeys)
	}
	for i, k := range keys {
		if len(k) < minSigningKeyBytes {
			return nil, fmt.Errorf("%s: %q: key %d has %d bytes, at least %d", field, echo(path), i+1, len(k), minSigningKeyBytes)
		}
	}
	return keys, nil
}

// readStoreSecret reads the password in path; "" when path is empty.
// Trailing whitespace (the newline an editor adds) is not part of it.
func readStoreSecret(field, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	data, err := fileread.Read(path, fileread.MaxSecretBytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	password := string(trimTrailingSpace(data))
	if password == "" {
		return "", fmt.Errorf("%s: %q is empty", field, echo(path))
	}
	return password, nil
}

// read builds the client's TLS settings from store.tls; nil without it.
func (t *StoreTLS) read() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // the operator's explicit choice, documented as for tests only
	}
	if t.CAFile != "" {
		pem, err := fileread.Read(t.CAFile, fileread.MaxTLSFileBytes)
		if err != nil {
			return nil, fmt.Errorf("store.tls.ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store.tls.ca_file: %q holds no PEM certificate", echo(t.CAFile))
		}
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return c, nil // validate says when one is missing
	}
	cert, err := fileread.Read(t.CertFile, fileread.MaxTLSFileBytes)
	if err != nil {
		return nil, fmt.Errorf("store.tls.cert_file: %w", err)
	}
	key, err := fileread.Read(t.KeyFile, fileread.MaxTLSFileBytes)
	if err != nil {
		return nil, fmt.Errorf("store.tls.key_file: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		// X509KeyPair's reasons never quote the key.
		return nil, fmt.Errorf("store.tls.cert_file, store.tls.key_file: not a certificate and its key: %w", err)
	}
	c.Certificates = []tls.Certificate{pair}
	return c, nil
}
