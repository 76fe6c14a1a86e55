// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The program serves the acknowledgement page's API behind the web
// config's basic auth, with writing on: an acknowledgement made through it
// is counted, the external URL's series is served, and the entry is in the
// list again after a restart on the same state folder.
func TestAcknowledgementsThroughTheProgram(t *testing.T) {
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(dir, "web.yml"), "basic_auth_users:\n  oncall: "+string(hash)+"\n")
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	testkit.WriteFile(t, filepath.Join(dir, "breach_exporter.yml"), "api: {base_url: http://127.0.0.1:1/api/v1, token_file: token}\naddresses: [alice@example.com]\nlabels: {address: hash}\n")

	life := func(do func(web string)) {
		web := testkit.FreeAddress(t)
		drain, cancelDrain := context.WithCancel(context.Background())
		defer cancelDrain()
		done := make(chan int, 1)
		var out testkit.SyncBuffer
		go func() {
			done <- run(stopping{drain: drain, now: context.Background()}, []string{"--config.file", filepath.Join(dir, "breach_exporter.yml"),
				"--storage.path", filepath.Join(dir, "data"), "--web.listen-address", web, "--web.config.file", filepath.Join(dir, "web.yml"),
				"--web.enable-acknowledgements", "--web.external-url", "https://breach.example.com/"}, &out, &out)
		}()
		testkit.Eventually(t, "/-/ready to answer 200", func() bool { return call(t, http.MethodGet, "http://"+web+"/-/ready", "")[0] == "200" })
		do(web)
		cancelDrain()
		exitsCleanly(t, done, "after the drain")
		if strings.Contains(out.String(), "alice@example.com") {
			t.Errorf("the log shows the clear address under labels.address: hash:\n%s", out.String())
		}
	}
	life(func(web string) {
		got := call(t, http.MethodPost, "http://"+web+"/api/v1/acknowledgements", `{"address":"alice@example.com","by":"Ada","comment":"rotated"}`)
		if got[0] != "201" || strings.Contains(got[1], "alice@example.com") {
			t.Fatalf("POST = %v, want 201 without the clear address", got)
		}
		metrics := call(t, http.MethodGet, "http://"+web+"/metrics", "")[1]
		for _, want := range []string{`breach_exporter_acknowledgement_changes_total{action="acknowledge"} 1`,
			`breach_exporter_acknowledgement_url_info{url="https://breach.example.com/acknowledge"} 1`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})
	life(func(web string) {
		if got := call(t, http.MethodGet, "http://"+web+"/api/v1/acknowledgements", ""); !strings.Contains(got[1], `"by":"Ada"`) || !strings.Contains(got[1], `"origin":"page"`) {
			t.Errorf("after a restart the list is %v, want the page's entry by Ada", got)
		}
	})
}

// call sends a request with the right basic auth and returns the status
// and the body.
func call(t *testing.T, method, url, body string) [2]string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("oncall", "right")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return [2]string{"", err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return [2]string{resp.Status[:3], string(data)}
}
