// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// An address in the address files (or the config) of two accounts is
// watched in the first account only, which the log says, once a file and
// other account, with the count and no address; a duplicate within one
// account is no news. Before, the address went to the first account
// without a log line.
func TestAddressOfTwoAccountsIsLogged(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"corp", "labs"} {
		testkit.WriteFile(t, filepath.Join(dir, name+".token"), "svc_ak_"+name)
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WriteFile(t, filepath.Join(dir, "corp", "hr.txt"), "alice@example.com\nbob@example.com\nbob@example.com\n")
	labsFile := filepath.Join(dir, "labs", "it.txt")
	testkit.WriteFile(t, labsFile, "ALICE@example.com\nbob@example.com\ncarol@example.com\nerin@example.com\ndave@example.com\n")
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), `accounts:
  - name: corp
    api: {base_url: http://127.0.0.1:9, token_file: corp.token}
    addresses: [dave@example.com]
    addresses_files: [corp/*.txt]
  - name: labs
    api: {base_url: http://127.0.0.1:9, token_file: labs.token}
    addresses: [erin@example.com]
    addresses_files: [labs/*.txt]
`)
	logs := &testkit.SyncBuffer{}
	exp, err := New(Options{
		ConfigFile: filepath.Join(dir, "config.yml"),
		UserAgent:  "breach_exporter/test",
		Logger:     log.NewLogfmtLogger(logs),
		Registerer: prometheus.NewRegistry(),
		Clock:      clockwork.NewFakeClock(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()

	accounts := map[string]string{}
	for _, e := range exp.watchlist.View().Entries {
		accounts[e.Address.Email] = e.Address.AccountName()
	}
	for email, want := range map[string]string{"alice@example.com": "corp", "bob@example.com": "corp", "dave@example.com": "corp", "carol@example.com": "labs", "erin@example.com": "labs"} {
		if accounts[email] != want {
			t.Errorf("%s is in account %q, want %q (the first source wins)", email, accounts[email], want)
		}
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "another account") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "file="+labsFile) || !strings.Contains(lines[0], "account=labs") ||
		!strings.Contains(lines[0], "other_account=corp") || !strings.Contains(lines[0], "addresses=3") || strings.Contains(lines[0], "@") {
		t.Errorf("log lines about addresses of another account:\n%s\nwant one naming %s, account=labs, other_account=corp, addresses=3 and no address\nall logs:\n%s", strings.Join(lines, "\n"), labsFile, logs)
	}
}

// Each failed read of an address file counts, however the file fails: a
// named pipe, then a device in its place, is two read errors. Before, both
// read as the same absence to the file watch: the device was no change,
// never read, never counted.
func TestEachFailedReadOfAnAddressFileCounts(t *testing.T) {
	f := newFixture(t, "addresses_files: [lists/*.txt]\n")
	file := filepath.Join(f.dir, "lists", "hr.txt")
	if err := os.Mkdir(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, file, "alice@example.com\n")
	if err := f.exp.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	series := testkit.Series("breach_exporter_address_file_read_errors_total", "file", file)
	errorsAre := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[series]
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v after 10s, want %v", series, got, want)
			}
			time.Sleep(20 * time.Millisecond) // a poll's pace: the file watch runs on the real clock
		}
	}
	errorsAre(0)

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(file, 0o600); err != nil {
		t.Fatal(err)
	}
	errorsAre(1)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", file); err != nil {
		t.Fatal(err)
	}
	errorsAre(2)
}
