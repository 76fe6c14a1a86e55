// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AddressFilesResult is the built binary with its addresses in address
// files: start, memory, and how soon a changed file is served.
type AddressFilesResult struct {
	Addresses int `json:"addresses"`
	Files     int `json:"files"`
	// Restored is true when each address's full state was restored from
	// a snapshot; false for a first start, every address pending.
	Restored bool `json:"restored"`
	// StartSeconds is exec to the end of the first /metrics answer that
	// holds every address (with its restored values when Restored).
	StartSeconds float64 `json:"start_seconds"`
	// RSSBytes is VmRSS after that scrape and a second one; PeakRSSBytes
	// VmHWM. Per address, they compare with a configured address's
	// (DeployedResult, whose alerts add to it).
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// ChangeSeconds is from the write of one file, whose addresses are all
	// replaced, to the end of the first scrape that shows the new ones and
	// not the old: the file watch's debounce (1 s), the re-read, the
	// watchlist's sync and that scrape.
	ChangeSeconds float64 `json:"change_seconds"`
}

// MeasureAddressFiles runs the binary exporter with n addresses spread
// over files address files, no alerts; restored, each address's full
// state is restored from a snapshot as MeasureDeployed's.
func MeasureAddressFiles(exporter string, n, files int, restored bool) (AddressFilesResult, error) {
	res := AddressFilesResult{Addresses: n, Files: files, Restored: restored}
	if n < files || files < 1 {
		return res, errors.New("address files: at least one address a file")
	}
	rs, err := newRestoredSetup("breach-bench-addressfiles-", n, files, "")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rs.dir)
	if !restored {
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
	if restored {
		_, res.StartSeconds, err = p.waitRestored(client, rs.emails, rs.refreshed)
	} else {
		res.StartSeconds, err = p.waitPending(client, url, rs.emails)
	}
	if err != nil {
		return fail(err)
	}
	if _, err := scrapeOnce(client, url, true); err != nil {
		return fail(err)
	}
	res.RSSBytes, res.PeakRSSBytes = processRSS(p.cmd.Process.Pid)

	// The first file's addresses (every files-th email) are replaced.
	var list strings.Builder
	for i := 0; i < n; i += files {
		fmt.Fprintf(&list, "replaced%06d@example.com\n", i)
	}
	gone := fmt.Sprintf(`breach_address_state{address=%q,`, rs.emails[0])
	came := fmt.Sprintf(`breach_address_state{address="replaced%06d@example.com",`, 0)
	path := filepath.Join(rs.dir, AddressFileName(0))
	tmp := path + ".tmp" // renamed over it, as a careful writer does
	if err := os.WriteFile(tmp, []byte(list.String()), 0o600); err != nil {
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
		if body := string(s.body); strings.Contains(body, came) && !strings.Contains(body, gone) {
			res.ChangeSeconds = time.Since(start).Seconds()
			break
		}
		if time.Now().After(deadline) {
			return fail(errors.New("the changed address file was not served within 30 s"))
		}
	}
	return res, nil
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
