package config

import (
	"fmt"
	"path/filepath"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// WebConfig is an exporter-toolkit web config file (TLS, basic auth) that a
// flag names.
type WebConfig struct {
	Flag string // --web.config.file, --webhook.web-config.file
	File string // empty: none
}

// checkWebConfig checks a web config file and the TLS files it names the
// way the exporter reads every file (fileread: regular, bounded, never
// blocking), then lets exporter-toolkit validate it. The toolkit reads
// them itself, with os.ReadFile: the web config at start, on every request
// (basic auth) and on every TLS handshake, and the certificate, key and
// client CA files on every handshake. What this check cannot stop is a file
// swapped for a named pipe after it: that blocks the handshakes and
// requests of the listener, never the reload, scrapes, snapshots or
// shutdown. Checked at start, on reload and by --config.check, a bad file
// is said there rather than on the next handshake.
func checkWebConfig(w WebConfig) error {
	data, err := fileread.Read(w.File, fileread.MaxWebConfigBytes)
	if err != nil {
		return fmt.Errorf("%s: %w", w.Flag, err)
	}
	// Only to learn which files it names; the toolkit parses it strictly.
	var c web.Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s: %s: %w", w.Flag, w.File, err)
	}
	c.TLSConfig.SetDirectory(filepath.Dir(w.File))
	if err := checkTLSFiles(c.TLSConfig.TLSCertPath, c.TLSConfig.TLSKeyPath, c.TLSConfig.ClientCAs); err != nil {
		return fmt.Errorf("%s: %w", w.Flag, err)
	}
	if err := web.Validate(w.File); err != nil {
		return fmt.Errorf("%s: %s: %w", w.Flag, w.File, err)
	}
	return nil
}

// checkTLSFiles reads each file named (empty: none) through fileread, so
// that a library reading it after (the toolkit, the API client) finds a
// regular file of bounded size.
func checkTLSFiles(files ...string) error {
	for _, f := range files {
		if f == "" {
			continue
		}
		if _, err := fileread.Read(f, fileread.MaxTLSFileBytes); err != nil {
			return err
		}
	}
	return nil
}
