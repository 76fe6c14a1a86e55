// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// write writes content into dir/name and returns its path.
func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	testkit.WriteFile(t, path, content)
	return path
}

// The store's Sentinel password and TLS files are read with the bundle,
// relative to the config; what is wrong in them is named by its field.
func TestLoadBundleStoreFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "token", "svc_ak_test\n")
	const base = "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"

	t.Run("sentinels and TLS files, relative to the config", func(t *testing.T) {
		ca := testkit.NewCA(t)
		cert, key := ca.Issue(t, "client")
		write(t, dir, "sentinel-password", "s3cret-sentinel\n")
		path := write(t, dir, "config.yml", base+fmt.Sprintf("store:\n  servers: [s1:26379, s2:26379]\n  master_name: m\n  sentinel_password_file: sentinel-password\n"+
			"  username: breach\n  tls: {ca_file: %q, cert_file: %q, key_file: %q, server_name: store.internal}\n", ca.File, cert, key))
		b, err := config.LoadBundle(path, config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.StoreSentinelPassword != "s3cret-sentinel" || b.StoreTLS == nil || b.StoreTLS.RootCAs == nil ||
			len(b.StoreTLS.Certificates) != 1 || b.StoreTLS.ServerName != "store.internal" || b.StoreTLS.MinVersion != tls.VersionTLS12 {
			t.Errorf("sentinel password %q, tls %+v", b.StoreSentinelPassword, b.StoreTLS)
		}
	})
	t.Run("TLS files that are wrong", func(t *testing.T) {
		ca := testkit.NewCA(t)
		cert, key := ca.Issue(t, "client")
		_, other := ca.Issue(t, "other")
		write(t, dir, "not-pem", "no certificate here\n")
		for tlsSection, want := range map[string]string{
			"{ca_file: absent}":                                                  "store.tls.ca_file",
			"{ca_file: not-pem}":                                                 "store.tls.ca_file: \"" + filepath.Join(dir, "not-pem") + "\" holds no PEM certificate",
			"{cert_file: " + cert + ", key_file: absent}":                        "store.tls.key_file",
			"{cert_file: " + cert + ", key_file: " + other + "}":                 "store.tls.cert_file, store.tls.key_file: not a certificate and its key",
			"{cert_file: " + cert + ", key_file: " + key + ", ca_file: not-pem}": "store.tls.ca_file",
		} {
			path := write(t, dir, "config.yml", base+"store:\n  servers: [s1:6379]\n  tls: "+tlsSection+"\n")
			_, err := config.LoadBundle(path, config.LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("tls %s: error %v, want one with %q", tlsSection, err, want)
			} else if strings.Contains(err.Error(), "BEGIN") || strings.Contains(err.Error(), "no certificate here") {
				t.Errorf("tls %s: the error shows a file's content: %v", tlsSection, err)
			}
		}
	})
}
