// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// AddressFilesOptions is what MeasureAddressFiles runs.
type AddressFilesOptions struct {
	Addresses int `json:"addresses"`
	Files     int `json:"files"`
	// Restored restores each address's full state from a snapshot as
	// MeasureDeployed's; false is a first start, every address pending.
	Restored bool `json:"restored"`
	// Owners writes the files in file_sd shape (addresses_sd_files), every
	// address in a group of its own with a team and an owner
	// (ownerGroup); false, plain address files without labels.
	Owners bool `json:"owners"`
	// NoInfo turns breach_address_info off (metrics.address_info: false):
	// the exporter as it was before owner labels.
	NoInfo bool `json:"no_info"`
}

// AddressFilesResult is the built binary with its addresses in address
// files: start, memory, series, and how soon a changed file is served.
type AddressFilesResult struct {
	AddressFilesOptions
	// StartSeconds is exec to the end of the first /metrics answer that
	// holds every address (with its restored values when Restored).
	StartSeconds float64 `json:"start_seconds"`
	// RSSBytes is VmRSS after that scrape and a second one; PeakRSSBytes
	// VmHWM. Per address, they compare with a configured address's
	// (DeployedResult, whose alerts add to it).
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// HeapInuseBytes is the exporter's go_memstats_heap_inuse_bytes in
	// that scrape: closer to what the addresses hold than RSS, which
	// keeps what the collector freed until the runtime returns it.
	HeapInuseBytes float64 `json:"heap_inuse_bytes"`
	// Series is the lines of that scrape; SeriesPerAddress those with an
	// address label, per address.
	Series           int     `json:"series"`
	SeriesPerAddress float64 `json:"series_per_address"`
	// ChangeSeconds is from the rename of one rewritten file over the
	// first one to the end of the first scrape that shows the change: the
	// file watch's debounce (1 s), the re-read, the watchlist's sync and
	// that scrape. A plain file's addresses are all replaced (served: the
	// new ones and not the old); with Owners, the file's first address
	// moves to another team (served: its breach_address_info with it).
	ChangeSeconds float64 `json:"change_seconds"`
}

// MeasureAddressFiles runs the binary exporter with o.Addresses addresses
// spread over o.Files address files, no alerts.
func MeasureAddressFiles(exporter string, o AddressFilesOptions) (AddressFilesResult, error) {
	res := AddressFilesResult{AddressFilesOptions: o}
	n, files := o.Addresses, o.Files
	if n < files || files < 1 {
		return res, errors.New("address files: at least one address a file")
	}
	more := ""
	if o.NoInfo {
		more = "metrics:\n  address_info: false\n"
	}
	rs, err := newRestoredSetup("breach-bench-addressfiles-", n, files, o.Owners, more)
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rs.dir)
	if !o.Restored {
		if err := os.RemoveAll(rs.storage); err != nil {
			return res, err
		}
	}
	client := newScrapeClient()
	defer client.CloseIdleConnections()
	p, err := startExporterProcess(exporter, rs.dir, rs.storage)
	if err != nil {
		return res, err
	}
	defer p.kill()
	fail := func(err error) (AddressFilesResult, error) {
		p.kill()
		return res, fmt.Errorf("%w\nexporter log:\n%s", err, p.logs.Bytes())
	}
	url := "http://" + p.web + "/metrics"
	if o.Restored {
		_, res.StartSeconds, err = p.waitRestored(client, rs.emails, rs.refreshed)
	} else {
		res.StartSeconds, err = p.waitPending(client, url, rs.emails)
	}
	if err != nil {
		return fail(err)
	}
	s, err := scrapeOnce(client, url, true)
	if err != nil {
		return fail(err)
	}
	res.RSSBytes, res.PeakRSSBytes = processRSS(p.cmd.Process.Pid)
	res.HeapInuseBytes = sumSamples(s.body, "go_memstats_heap_inuse_bytes", "")
	series, withAddress := countSeries(s.body)
	res.Series, res.SeriesPerAddress = series, float64(withAddress)/float64(n)
	if err := checkInfo(s.body, rs.emails[0], o); err != nil {
		return fail(err)
	}

	path, content, served, err := changedFile(rs, o)
	if err != nil {
		return fail(err)
	}
	tmp := path + ".tmp" // renamed over it, as a careful writer does
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		return fail(err)
	}
	start := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	for deadline := start.Add(30 * time.Second); ; {
		s, err := scrapeOnce(client, url, true)
		if err != nil {
			return fail(err)
		}
		if served(s.body) {
			res.ChangeSeconds = time.Since(start).Seconds()
			break
		}
		if time.Now().After(deadline) {
			return fail(errors.New("the changed address file was not served within 30 s"))
		}
	}
	return res, nil
}

// changedFile is the first address file rewritten, and how a scrape shows
// that it was read: with owner labels, its first address in another team;
// else, every address replaced.
func changedFile(rs *restoredSetup, o AddressFilesOptions) (path string, content []byte, served func([]byte) bool, err error) {
	if o.Owners {
		var groups []sdGroup
		for i := 0; i < o.Addresses; i += o.Files {
			team := ""
			if i == 0 {
				team = "moved"
			}
			groups = append(groups, ownerGroup(i, rs.emails[i], team))
		}
		content, err = json.Marshal(groups)
		moved := regexp.MustCompile(`(?m)^breach_address_info\{[^}]*address="` + regexp.QuoteMeta(rs.emails[0]) + `"[^}]*team="moved"`)
		return filepath.Join(rs.dir, sdFileName(0)), content, moved.Match, err
	}
	var list strings.Builder
	for i := 0; i < o.Addresses; i += o.Files {
		fmt.Fprintf(&list, "replaced%06d@example.com\n", i)
	}
	gone := []byte(fmt.Sprintf(`breach_address_state{address=%q,`, rs.emails[0]))
	came := []byte(fmt.Sprintf(`breach_address_state{address="replaced%06d@example.com",`, 0))
	return filepath.Join(rs.dir, AddressFileName(0)), []byte(list.String()), func(body []byte) bool {
		return bytes.Contains(body, came) && !bytes.Contains(body, gone)
	}, nil
}

// checkInfo checks that the scrape serves email's breach_address_info as o
// wants: none with NoInfo, with its owner labels with Owners.
func checkInfo(body []byte, email string, o AddressFilesOptions) error {
	info := regexp.MustCompile(`(?m)^breach_address_info\{[^}]*address="` + regexp.QuoteMeta(email) + `".*$`)
	line := info.Find(body)
	g := ownerGroup(0, email, "")
	switch {
	case o.NoInfo && line != nil:
		return fmt.Errorf("metrics.address_info is off, yet /metrics serves %s", line)
	case o.NoInfo:
		return nil
	case line == nil:
		return fmt.Errorf("/metrics serves no breach_address_info of %s", email)
	case o.Owners && (!bytes.Contains(line, []byte(fmt.Sprintf(`team=%q`, g.Labels["team"]))) || !bytes.Contains(line, []byte(fmt.Sprintf(`owner=%q`, g.Labels["owner"])))):
		return fmt.Errorf("/metrics serves %s, want the owner labels %v", line, g.Labels)
	}
	return nil
}

// waitPending times exec to the end of the first /metrics answer, which
// must hold every address, pending.
func (p *exporterProcess) waitPending(client *http.Client, url string, emails []string) (float64, error) {
	if err := waitServing(client, "http://"+p.web+"/-/healthy", p.exited); err != nil {
		return 0, err
	}
	first, err := scrapeOnce(client, url, true)
	if err != nil {
		return 0, err
	}
	start := time.Since(p.started).Seconds()
	if got := bytes.Count(first.body, []byte(`,state="pending"} 1`)); got != len(emails) {
		return 0, fmt.Errorf("first scrape: %d addresses pending, want %d", got, len(emails))
	}
	return start, nil
}
