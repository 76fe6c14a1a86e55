// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"
)

// update rewrites the screenshots of the acknowledgement page and the list
// in docs/img from what the browser test shows.
var update = flag.Bool("update", false, "write the browser test's screenshots to docs/img")

// The screenshots the documentation shows (docs/acknowledgements.md,
// docs/runbook.md), relative to the repository's root.
const (
	pageScreenshot = "docs/img/acknowledge-page.png"
	listScreenshot = "docs/img/acknowledgements-list.png"
)

// The test configuration's intervals (prometheusConfig): an
// acknowledgement is in force when the page answers, the next scrape
// sees it, the next evaluation resolves the alert and sends the
// resolution to Alertmanager at once.
const (
	scrapeInterval = time.Second
	evalInterval   = time.Second
	// resolvePoll is how often Alertmanager's API is read while the
	// resolution is timed: fine enough not to blur the bound.
	resolvePoll = 50 * time.Millisecond
	// sendAllowance covers what the bound leaves out: Prometheus's
	// notifier posting the resolution and Alertmanager taking it in,
	// and the poll's granularity.
	sendAllowance = 500 * time.Millisecond
)

// listHeading finds the heading of the list of acknowledgements in force.
const listHeading = `//h1[text()="Acknowledgements in force"]`

// TestAcknowledgeFromThePage is the acknowledgement page as the person
// holding the pager uses it: a real browser (Debian's headless chromium,
// driven over the DevTools protocol) follows the acknowledge_url of the
// page Alertmanager sent, answers the exporter's basic auth challenge
// (--web.config.file), submits the form, and the alert resolves in
// Alertmanager within one scrape plus one evaluation interval. The
// acknowledgement holds across a restart of the exporter (the state
// folder), and news for the address and feed after it pages again.
// Markup in an acknowledgement shows as text, and the browser runs none
// of it.
func TestAcknowledgeFromThePage(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not on PATH: install Debian's chromium package (make e2e-deps does)")
	}
	login := url.UserPassword("oncall", rand.Text())
	ctx, s := startStack(t, login)
	const source = "index"
	w := wantAlert{name: "BreachCredentialsExposed", labels: map[string]string{"address": subjectAddress, "source": source}}

	// The subject's password shows in plaintext: it pages.
	if err := s.adminPost(ctx, "/admin/feed", subjectFeed(source, true), http.StatusOK); err != nil {
		t.Fatal(err)
	}
	s.eventually(ctx, t, "the page", defaultFireTimeout+deliveryTimeout, s.notifiedSince(0, w, "firing"))
	notified, _ := s.receiver.notifications()
	paged := firing(notified, w.name)
	link := paged[slices.IndexFunc(paged, func(d delivery) bool { return s.matches(w, d.labels) })].annotations["acknowledge_url"]
	if want := "http://" + s.webAddr + "/acknowledge?"; !strings.HasPrefix(link, want) {
		t.Fatalf("the page's acknowledge_url is %q, want it under %s", link, want)
	}

	b := newBrowser(ctx, t, chromium, login)
	const comment = "Password rotated, sessions ended"
	if err := chromedp.Do(b.ctx,
		chromedp.Navigate(link),
		chromedp.WaitVisible("#comment"),
		chromedp.SendKeys("#comment", comment),
	); err != nil {
		t.Fatalf("opening %s: %v", link, err)
	}
	by, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("by").value`))
	if err != nil || by != login.Username() {
		t.Errorf("the form's by is %q (%v), want the logged-in user %q", by, err, login.Username())
	}
	b.screenshot(t, pageScreenshot)
	notified, _ = s.receiver.notifications()
	mark := len(notified)
	submitted := time.Now()
	if err := chromedp.Do(b.ctx, chromedp.Click(`button[type="submit"]`), chromedp.WaitVisible(listHeading)); err != nil {
		t.Fatalf("submitting the form: %v", err)
	}
	if loc, err := chromedp.Run(b.ctx, chromedp.Location()); err != nil || !strings.HasSuffix(loc, "/acknowledgements") {
		t.Errorf("after the form the browser is at %q (%v), want the list", loc, err)
	}
	if b.challenges.Load() == 0 {
		t.Error("the browser never met a basic auth challenge: the listener did not ask for the login")
	}

	// Resolved in Alertmanager within a scrape and an evaluation.
	bound := scrapeInterval + evalInterval + sendAllowance
	if err := s.pollEvery(ctx, resolvePoll, resolveTimeout, s.notInAlertmanager(w)); err != nil {
		t.Fatalf("acknowledged on the page: %v", err)
	}
	resolved := time.Since(submitted)
	if resolved > bound {
		t.Errorf("resolved in Alertmanager %.2fs after the submit, want within a scrape and an evaluation interval (%s, with %s to send)", resolved.Seconds(), scrapeInterval+evalInterval, sendAllowance)
	}
	s.eventually(ctx, t, "the resolved notification", deliveryTimeout, s.notifiedSince(mark, w, "resolved"))

	// A restart: the new process serves the acknowledgement from its
	// state folder (which keeps the alert resolved once the rule's
	// look-back has passed over the old process's series), the list shows
	// it as the page's, and the alert stays resolved.
	if err := s.runningExporter().stopNow(); err != nil {
		t.Fatal(err)
	}
	s.startExporter(ctx, t, "exporter-restarted")
	ack := fmt.Sprintf(`breach_source_acknowledged_timestamp_seconds{address=%q,source=%q,by=%q,comment=%q}`, subjectAddress, source, login.Username(), comment)
	s.eventually(ctx, t, "the acknowledgement after a restart", startupTimeout, func(ctx context.Context) error { return s.servesSeries(ctx, ack) })
	if origin := s.apiAcknowledgement(ctx, t, source)["origin"]; origin != "page" {
		t.Errorf("after a restart the API lists the acknowledgement from %v, want the page", origin)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate(s.webURL("/acknowledgements")), chromedp.WaitVisible(listHeading)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(b.ctx, chromedp.Text("main"))
	if err != nil || !strings.Contains(text, comment) || !strings.Contains(text, "(page)") || !strings.Contains(text, "handled") {
		t.Errorf("after a restart the list shows %q (%v), want the page's acknowledgement, handled", text, err)
	}
	b.screenshot(t, listScreenshot)
	if err := s.notActive(w)(ctx); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	notified, _ = s.receiver.notifications()
	if slices.ContainsFunc(firing(notified[mark:], w.name), func(d delivery) bool { return s.matches(w, d.labels) }) {
		t.Errorf("acknowledged, the receiver got a firing %s again", w)
	}

	// News: the feed lists one more database. It pages again, and the
	// acknowledgement no longer covers the feed.
	feed := subjectFeed(source, true)
	feed["databases"] = append(slices.Clone(feed["databases"].([]string)), "e2e-after-the-page-2026")
	changed := time.Now()
	if err := s.adminPost(ctx, "/admin/feed", feed, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	s.eventually(ctx, t, "the page after news", defaultFireTimeout+deliveryTimeout, s.notifiedSince(mark, w, "firing"))
	if covers := s.apiAcknowledgement(ctx, t, source)["covers"]; covers != false {
		t.Errorf("after news the API says the acknowledgement covers the feed: %v", covers)
	}
	s.hostileValuesShowAsText(ctx, t, b, source)
	t.Logf("acknowledged in the browser: resolved in Alertmanager %.2fs after the submit (bound %s); held across a restart; news paged again in %.1fs",
		resolved.Seconds(), bound, time.Since(changed).Seconds())
}

// hostileValuesShowAsText acknowledges the subject's feed through the API
// with markup in by and comment: the list in the browser shows it as
// text, and the browser runs none of it.
func (s *stack) hostileValuesShowAsText(ctx context.Context, t *testing.T, b *browser, source string) {
	t.Helper()
	const by, comment = `<b>mallory</b>`, `<script>document.title="pwned"</script><img src=x onerror="document.title='pwned'">`
	body, err := json.Marshal(map[string]string{"address": subjectAddress, "source": source, "by": by, "comment": comment})
	if err != nil {
		t.Fatal(err)
	}
	if err := post(ctx, s.webURL("/api/v1/acknowledgements"), body, nil, http.StatusCreated); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate(s.webURL("/acknowledgements")), chromedp.WaitVisible(listHeading)); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(b.ctx, chromedp.Title())
	if err != nil || title != "Acknowledgements in force · breach_exporter" {
		t.Errorf("with hostile values the list's title is %q (%v): the browser ran them", title, err)
	}
	markup, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("main script, main img, main b").length`))
	if err != nil || markup != 0 {
		t.Errorf("the list has %d elements from the hostile values (%v), want none", markup, err)
	}
	text, err := chromedp.Run(b.ctx, chromedp.Text("main"))
	if err != nil || !strings.Contains(text, by) || !strings.Contains(text, comment) {
		t.Errorf("the list does not show the hostile values as text (%v):\n%s", err, text)
	}
}

// requireLogin makes the exporter's web listener ask for login (a web
// config with its user, the password hashed) and take acknowledgements,
// and Prometheus scrape the exporter with it.
func (s *stack) requireLogin(t *testing.T, login *url.Userinfo, prometheusFile string) {
	t.Helper()
	password, _ := login.Password()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(s.dir, "web-config.yml")
	writeYAML(t, webConfig, yamlMap{"basic_auth_users": yamlMap{login.Username(): string(hash)}})
	s.login = login
	s.exporterArgs = append(s.exporterArgs, "--web.config.file="+webConfig, "--web.enable-acknowledgements")

	cfg := readYAML(t, prometheusFile)
	for _, sc := range mapsAt(t, prometheusFile, cfg, "scrape_configs") {
		if sc["job_name"] == jobName {
			sc["basic_auth"] = yamlMap{"username": login.Username(), "password": password}
		}
	}
	writeYAML(t, prometheusFile, cfg)
}

// webURL is path on the exporter's web listener, with the login it asks
// for (Go's client sends it as basic auth).
func (s *stack) webURL(path string) string {
	return (&url.URL{Scheme: "http", Host: s.webAddr, Path: path, User: s.login}).String()
}

// notInAlertmanager fails while Alertmanager's API lists w: it lists no
// resolved alert.
func (s *stack) notInAlertmanager(w wantAlert) func(context.Context) error {
	return func(ctx context.Context) error {
		held, err := s.am.alerts(ctx)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(held, func(a amAlert) bool { return s.matches(w, a.Labels) }) {
			return fmt.Errorf("Alertmanager still holds %s", w)
		}
		return nil
	}
}

// apiAcknowledgement is the acknowledgement of the subject's feed that the
// exporter's API lists (nil for none).
func (s *stack) apiAcknowledgement(ctx context.Context, t *testing.T, source string) map[string]any {
	t.Helper()
	body, err := getBody(ctx, s.webURL("/api/v1/acknowledgements"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Acknowledgements []struct {
			Address, Source string
			Acknowledgement map[string]any
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("the API's list: %v", err)
	}
	for _, a := range list.Acknowledgements {
		if a.Address == subjectAddress && a.Source == source {
			return a.Acknowledgement
		}
	}
	return nil
}

// browser is a headless chromium driven over the DevTools protocol, which
// answers basic auth challenges with the login.
type browser struct {
	ctx        context.Context
	root       string
	challenges atomic.Int64 // basic auth challenges answered
}

// newBrowser starts chromium with its own profile in the test's folder;
// it is closed at the end of the test. Every request is let through, and
// a basic auth challenge is answered with login, as a person would type it.
func newBrowser(ctx context.Context, t *testing.T, chromium string, login *url.Userinfo) *browser {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		// The test runs as root in CI, where chromium's sandbox cannot
		// start; the pages are the exporter's, on loopback.
		chromedp.NoSandbox,
		chromedp.WindowSize(760, 900),
	)...)
	bctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: bctx, root: repoRoot(t)}

	password, _ := login.Password()
	paused := chromedp.Events(bctx, fetch.RequestPaused)
	challenged := chromedp.Events(bctx, fetch.AuthRequired)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			chromedp.Call(bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range challenged {
			if err != nil {
				return
			}
			b.challenges.Add(1)
			chromedp.Call(bctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
					Username: login.Username(), Password: password}})
		}
	}()
	handle := true
	if _, err := chromedp.Call(bctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// screenshot writes the whole page to path (under the repository's root)
// with -update, and checks that one can be taken otherwise.
func (b *browser) screenshot(t *testing.T, path string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil || len(png) == 0 {
		t.Fatalf("screenshot for %s: %d bytes, %v", path, len(png), err)
	}
	if !*update {
		return
	}
	if err := os.WriteFile(filepath.Join(b.root, path), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
