// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// address254 is a valid address of exactly breach.MaxAddressBytes bytes.
var address254 = "a@" + strings.Repeat("b", breach.MaxAddressBytes-len("a@.com")) + ".com"

// An accepted alert is counted under its address (discovered here: it is
// not configured), its address is queued for an immediate re-read, and
// the body parses to the spec's fields.
func TestAcceptedAlertCountsAndQueuesReread(t *testing.T) {
	f := newFixture(t, settings{})
	rec := f.post([]byte(validAlert), testSecret)
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("got %d %q, want 204 with an empty body", rec.Code, rec.Body)
	}

	// breach_alerts_total exists at 0 for critical alerts of every known
	// source of a watched address; the other families start with its first
	// alert.
	const expected = `
# HELP breach_alerts_total Accepted alert.created webhooks.
# TYPE breach_alerts_total counter
breach_alerts_total{address="alice@example.com",severity="critical",source="archive"} 0
breach_alerts_total{address="alice@example.com",severity="critical",source="combolist"} 1
breach_alerts_total{address="alice@example.com",severity="critical",source="enriched"} 0
breach_alerts_total{address="alice@example.com",severity="critical",source="index"} 0
# HELP breach_alert_new_databases_total Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).
# TYPE breach_alert_new_databases_total counter
breach_alert_new_databases_total{address="alice@example.com",source="combolist"} 2
# HELP breach_alert_exposed_fields_total Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.
# TYPE breach_alert_exposed_fields_total counter
breach_alert_exposed_fields_total{address="alice@example.com",field="password",source="combolist"} 1
breach_alert_exposed_fields_total{address="alice@example.com",field="phone",source="combolist"} 1
# HELP breach_alert_new_plaintext_passwords_total Accepted alerts whose delta introduced a new plaintext password.
# TYPE breach_alert_new_plaintext_passwords_total counter
breach_alert_new_plaintext_passwords_total{address="alice@example.com",source="combolist"} 1
# HELP breach_alert_last_observed_timestamp_seconds observed_at of the newest accepted alert, as a Unix time.
# TYPE breach_alert_last_observed_timestamp_seconds gauge
breach_alert_last_observed_timestamp_seconds{address="alice@example.com",source="combolist"} 1740830340
# HELP breach_webhook_requests_total Webhook requests received, by outcome; every request has exactly one outcome.
# TYPE breach_webhook_requests_total counter
breach_webhook_requests_total{outcome="accepted"} 1
breach_webhook_requests_total{outcome="duplicate"} 0
breach_webhook_requests_total{outcome="invalid_signature"} 0
breach_webhook_requests_total{outcome="malformed"} 0
breach_webhook_requests_total{outcome="method_not_allowed"} 0
breach_webhook_requests_total{outcome="not_found"} 0
breach_webhook_requests_total{outcome="stale"} 0
breach_webhook_requests_total{outcome="too_large"} 0
breach_webhook_requests_total{outcome="unavailable"} 0
breach_webhook_requests_total{outcome="unknown_event"} 0
breach_webhook_requests_total{outcome="unsupported_media_type"} 0
# HELP breach_webhook_alerts_untracked_total Accepted alerts not counted under an address label, by reason: the address is not watched and was not discovered (discovery_off, discovery_limit), or it is another account's than the one whose secret verified the alert (other_account), or that account is no longer configured (removed_account).
# TYPE breach_webhook_alerts_untracked_total counter
breach_webhook_alerts_untracked_total{reason="discovery_limit"} 0
breach_webhook_alerts_untracked_total{reason="discovery_off"} 0
breach_webhook_alerts_untracked_total{reason="other_account"} 0
breach_webhook_alerts_untracked_total{reason="removed_account"} 0
# HELP breach_webhook_alerts_future_observed_total Accepted alerts whose observed_at was more than 5 minutes ahead of the exporter's clock; they are counted but do not move breach_alert_last_observed_timestamp_seconds.
# TYPE breach_webhook_alerts_future_observed_total counter
breach_webhook_alerts_future_observed_total 0
`
	if err := testutil.GatherAndCompare(f.gatherer, strings.NewReader(expected),
		append([]string{"breach_webhook_requests_total", "breach_webhook_alerts_untracked_total",
			"breach_webhook_alerts_future_observed_total"}, alertFamilies...)...); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(f.gatherer, "breach_webhook_request_duration_seconds"); n != 1 {
		t.Fatalf("duration histogram series = %d, want 1", n)
	}

	// What the old callback handed on: the alert as the spec defines it.
	want := Alert{
		Event: "alert.created", Severity: "critical", Address: "alice@example.com", Source: "combolist",
		Summary: "2 new databases",
		Delta: Delta{PreviousCount: 3, NewCount: 5, NewSourceDBs: []string{"db-one", "db-two"},
			NewlyExposedFields: []string{"password", "phone"}, HasNewPlaintext: true},
		ObservedAt:   time.Date(2025, 3, 1, 11, 59, 0, 0, time.UTC),
		DashboardURL: "https://service.example/dashboard/a/1",
	}
	if event, got, err := parseBody([]byte(validAlert)); err != nil || event != breach.EventAlertCreated || !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed %q %+v (err %v), want %+v", event, got, err, want)
	}
	// ...and what it asked for: the address re-read at once.
	if got := f.queued(); !slices.Equal(got, []string{"alice@example.com"}) {
		t.Fatalf("addresses queued for a re-read = %v, want alice's", got)
	}
}

func TestOutcomes(t *testing.T) {
	signed := []byte(validAlert)
	const maxBody = 1024
	atCap := append([]byte(validAlert), bytes.Repeat([]byte(" "), maxBody-len(validAlert))...)
	overCap := append(atCap, ' ')

	withField := func(old, new string) []byte {
		b := strings.Replace(validAlert, old, new, 1)
		if b == validAlert {
			t.Fatalf("test bug: %q not in the alert", old)
		}
		return []byte(b)
	}

	type request struct {
		method      string
		body        []byte
		signatures  []string // header values; nil: sign body with testSecret
		contentType string
	}
	cases := []struct {
		name    string
		req     request
		status  int
		outcome string
	}{
		{"get", request{method: http.MethodGet}, 405, outcomeMethodNotAllowed},
		{"put signed", request{method: http.MethodPut, body: signed}, 405, outcomeMethodNotAllowed},
		{"exactly at the cap", request{body: atCap}, 204, outcomeAccepted},
		{"one byte over the cap", request{body: overCap}, 413, outcomeTooLarge},
		{"over the cap and unsigned", request{body: overCap, signatures: []string{}}, 413, outcomeTooLarge},
		{"no signature", request{body: signed, signatures: []string{}}, 401, outcomeInvalidSignature},
		{"empty signature", request{body: signed, signatures: []string{""}}, 401, outcomeInvalidSignature},
		{"uppercase hex", request{body: signed, signatures: []string{
			"sha256=" + strings.ToUpper(strings.TrimPrefix(sim.Sign(testSecret, signed), "sha256="))}}, 401, outcomeInvalidSignature},
		{"uppercase prefix", request{body: signed, signatures: []string{
			"SHA256=" + strings.TrimPrefix(sim.Sign(testSecret, signed), "sha256=")}}, 401, outcomeInvalidSignature},
		{"bare hex", request{body: signed, signatures: []string{
			strings.TrimPrefix(sim.Sign(testSecret, signed), "sha256=")}}, 401, outcomeInvalidSignature},
		{"short hex", request{body: signed, signatures: []string{sim.Sign(testSecret, signed)[:len("sha256=")+63]}}, 401, outcomeInvalidSignature},
		{"trailing space in header", request{body: signed, signatures: []string{sim.Sign(testSecret, signed) + " "}}, 401, outcomeInvalidSignature},
		{"wrong secret", request{body: signed, signatures: []string{sim.Sign([]byte("wrong"), signed)}}, 401, outcomeInvalidSignature},
		{"two signature headers", request{body: signed, signatures: []string{sim.Sign(testSecret, signed), sim.Sign(testSecret, signed)}}, 401, outcomeInvalidSignature},
		{"trailing whitespace added after signing", request{body: append(append([]byte(nil), signed...), '\n'),
			signatures: []string{sim.Sign(testSecret, signed)}}, 401, outcomeInvalidSignature},
		{"trailing whitespace removed after signing", request{body: signed,
			signatures: []string{sim.Sign(testSecret, append(append([]byte(nil), signed...), '\n'))}}, 401, outcomeInvalidSignature},
		{"unsigned with a wrong content type", request{body: signed, signatures: []string{}, contentType: "text/plain"}, 401, outcomeInvalidSignature},
		{"text/plain", request{body: signed, contentType: "text/plain"}, 415, outcomeUnsupportedMediaType},
		{"no content type", request{body: signed, contentType: "-"}, 415, outcomeUnsupportedMediaType},
		{"unparseable content type", request{body: signed, contentType: "application/json; ;"}, 415, outcomeUnsupportedMediaType},
		{"json with charset", request{body: signed, contentType: "Application/JSON; charset=utf-8"}, 204, outcomeAccepted},
		{"not json", request{body: []byte(`{"event":`)}, 400, outcomeMalformed},
		{"trailing garbage", request{body: []byte(validAlert + "}")}, 400, outcomeMalformed},
		{"empty body", request{body: []byte{}}, 400, outcomeMalformed},
		{"array", request{body: []byte(`[]`)}, 400, outcomeMalformed},
		{"null", request{body: []byte(`null`)}, 400, outcomeMalformed},
		{"no event", request{body: withField(`"event":"alert.created",`, ``)}, 400, outcomeMalformed},
		{"event not a string", request{body: withField(`"event":"alert.created"`, `"event":1`)}, 400, outcomeMalformed},
		{"no severity", request{body: withField(`"severity":"critical",`, ``)}, 400, outcomeMalformed},
		{"no address", request{body: withField(`"address":"alice@example.com",`, ``)}, 400, outcomeMalformed},
		{"empty address", request{body: withField(`"address":"alice@example.com"`, `"address":""`)}, 400, outcomeMalformed},
		{"no source", request{body: withField(`"source":"combolist",`, ``)}, 400, outcomeMalformed},
		{"no observed_at", request{body: withField(`,"observed_at":"2025-03-01T11:59:00Z"`, ``)}, 400, outcomeMalformed},
		{"no delta", request{body: []byte(`{"event":"alert.created","severity":"info","address":"a@b.c","source":"index","observed_at":"2025-03-01T11:59:00Z"}`)}, 400, outcomeMalformed},
		{"null delta", request{body: []byte(`{"event":"alert.created","severity":"info","address":"a@b.c","source":"index","delta":null,"observed_at":"2025-03-01T11:59:00Z"}`)}, 400, outcomeMalformed},
		{"delta of the wrong type", request{body: withField(`"new_source_dbs":["db-one","db-two"]`, `"new_source_dbs":"db-one"`)}, 400, outcomeMalformed},
		{"observed_at not a timestamp", request{body: withField(`2025-03-01T11:59:00Z`, `yesterday`)}, 400, outcomeMalformed},
		{"observed_at without zone", request{body: withField(`2025-03-01T11:59:00Z`, `2025-03-01T11:59:00`)}, 400, outcomeMalformed},
		{"observed_at with fraction and offset", request{body: withField(`2025-03-01T11:59:00Z`, `2025-03-01T12:59:00.250+01:00`)}, 204, outcomeAccepted},
		{"optional fields absent", request{body: []byte(`{"event":"alert.created","severity":"info","address":"a@b.c","source":"index","delta":{},"observed_at":"2025-03-01T11:59:00Z"}`)}, 204, outcomeAccepted},
		{"unknown members ignored", request{body: withField(`"summary"`, `"future":{"x":[1]},"summary"`)}, 204, outcomeAccepted},
		{"unknown event", request{body: []byte(`{"event":"alert.resolved","anything":true}`)}, 204, outcomeUnknownEvent},
		// The address may become a discovered one: polled and a label value,
		// so it must be a bare addr-spec of at most 254 bytes.
		{"address of 254 bytes", request{body: withField(`"address":"alice@example.com"`, `"address":"`+address254+`"`)}, 204, outcomeAccepted},
		{"address of 255 bytes", request{body: withField(`"address":"alice@example.com"`, `"address":"x`+address254+`"`)}, 400, outcomeMalformed},
		{"address with a display name", request{body: withField(`"address":"alice@example.com"`, `"address":"Alice <alice@example.com>"`)}, 400, outcomeMalformed},
		{"address in angle brackets", request{body: withField(`"address":"alice@example.com"`, `"address":"<alice@example.com>"`)}, 400, outcomeMalformed},
		{"address without a domain", request{body: withField(`"address":"alice@example.com"`, `"address":"alice"`)}, 400, outcomeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, settings{MaxBodyBytes: maxBody})
			method := tc.req.method
			if method == "" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, "/webhook", bytes.NewReader(tc.req.body))
			switch tc.req.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				req.Header.Set("Content-Type", tc.req.contentType)
			}
			if tc.req.signatures == nil {
				req.Header.Set(SignatureHeader, sim.Sign(testSecret, tc.req.body))
			}
			for _, s := range tc.req.signatures {
				req.Header.Add(SignatureHeader, s)
			}

			rec := f.serve(req)

			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, tc.status, rec.Body)
			}
			if got := f.outcomeCount(tc.outcome); got != 1 {
				t.Errorf("outcome %s = %v, want 1", tc.outcome, got)
			}
			if got := f.outcomeSum(); got != 1 {
				t.Errorf("outcomes sum to %v, want exactly one", got)
			}
			if tc.status == http.StatusNoContent {
				if rec.Body.Len() != 0 {
					t.Errorf("204 with body %q", rec.Body)
				}
			} else {
				if want := `{"error":"` + tc.outcome + `"}` + "\n"; rec.Body.String() != want {
					t.Errorf("body %q, want %q", rec.Body, want)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			}
			if tc.status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "POST" {
				t.Errorf("Allow = %q, want POST", rec.Header().Get("Allow"))
			}
			accepted := tc.outcome == outcomeAccepted
			if n := f.alertSeries(); (n > 0) != accepted {
				t.Errorf("%d alert series after outcome %s", n, tc.outcome)
			}
			if q := f.queued(); (len(q) == 1) != accepted || len(q) > 1 {
				t.Errorf("addresses queued for a re-read %v after outcome %s", q, tc.outcome)
			}
		})
	}
}

func TestSecretRotation(t *testing.T) {
	f := newFixture(t, settings{Secrets: [][]byte{otherSecret, testSecret}})
	if rec := f.post(alertBody("signed with the old secret"), otherSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("old secret: %d", rec.Code)
	}
	if rec := f.post(alertBody("signed with the new secret"), testSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("new secret: %d", rec.Code)
	}
	if got := f.outcomeCount(outcomeAccepted); got != 2 {
		t.Fatalf("accepted = %v, want 2", got)
	}

	f.update(settings{Secrets: [][]byte{testSecret}})
	if rec := f.post(alertBody("old secret after its removal"), otherSecret); rec.Code != http.StatusUnauthorized {
		t.Fatalf("removed secret: %d, want 401", rec.Code)
	}
	if rec := f.post(alertBody("new secret after the removal"), testSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("kept secret: %d, want 204", rec.Code)
	}
}

// Settings the receiver cannot run with are refused by the one load path,
// so a start fails and a reload keeps the config in force; the receiver
// then goes on as before.
func TestSettingsRejected(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), "svc_ak_test")
	testkit.WriteFile(t, filepath.Join(dir, "secret"), string(testSecret))
	testkit.WriteFile(t, filepath.Join(dir, "empty"), "\n")
	// No secret anywhere: the environment variable must not supply one.
	t.Setenv(config.WebhookSecretEnv, "")
	os.Unsetenv(config.WebhookSecretEnv)
	bad := map[string]string{
		"no secret":              "",
		"empty secret":           "  secret_files: [secret, empty]\n",
		"negative body cap":      "  secret_files: [secret]\n  max_body_bytes: -1\n",
		"negative dedup window":  "  secret_files: [secret]\n  dedup_window: -1s\n",
		"negative dedup entries": "  secret_files: [secret]\n  dedup_max_entries: -1\n",
		"negative max event age": "  secret_files: [secret]\n  max_event_age: -1s\n",
	}
	f := newFixture(t, settings{})
	for name, webhook := range bad {
		path := filepath.Join(dir, "config.yml")
		testkit.WriteFile(t, path, "api: {base_url: 'http://127.0.0.1:1/api/v1', token_file: token}\nwebhook:\n"+webhook)
		if bundle, err := config.LoadBundle(path, config.LoadOptions{Webhook: true}); err == nil {
			t.Errorf("the load accepted %s: %+v", name, bundle.Config.Webhook)
		}
	}
	// A refused load changes nothing.
	f.expectOutcome([]byte(validAlert), outcomeAccepted)
}

// The secrets in force are the ones read at load: changing the secret file
// changes nothing until the next reload.
func TestSecretsAreCopied(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), "svc_ak_test")
	testkit.WriteFile(t, filepath.Join(dir, "secret"), string(testSecret)+"\n")
	path := filepath.Join(dir, "config.yml")
	testkit.WriteFile(t, path, "api: {base_url: 'http://127.0.0.1:1/api/v1', token_file: token}\nwebhook: {secret_files: [secret]}\n")
	bundle, err := config.LoadBundle(path, config.LoadOptions{Webhook: true})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, settings{})
	f.config.Store(bundle)
	f.sync(bundle)
	testkit.WriteFile(t, filepath.Join(dir, "secret"), string(otherSecret))
	f.expectOutcome([]byte(validAlert), outcomeAccepted)
	if rec := f.post(alertBody("signed with the file's new secret"), otherSecret); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a secret written after the load: %d, want 401", rec.Code)
	}
}

func TestDuplicateWithinWindowThenExpiry(t *testing.T) {
	f := newFixture(t, settings{DedupWindow: time.Hour})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeAccepted)
	if got := f.queued(); !slices.Equal(got, []string{"alice@example.com"}) {
		t.Fatalf("queued for a re-read: %v, want alice", got)
	}
	// The scheduler sends the re-read; a duplicate must not ask again.
	f.watchlist.Started(breach.Key("alice@example.com"), f.clock.Now())
	f.clock.Advance(time.Hour - time.Second)
	f.expectOutcome(body, outcomeDuplicate)
	if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 1 {
		t.Fatalf("alerts_total = %v after a duplicate, want 1", got)
	}
	if got := f.queued(); len(got) != 0 {
		t.Fatalf("a duplicate queued %v for a re-read", got)
	}

	f.clock.Advance(time.Second)
	f.expectOutcome(body, outcomeAccepted)
	if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 2 {
		t.Fatalf("alerts_total = %v after the window, want 2", got)
	}
}

func TestDedupEvictsOldestAtCapacity(t *testing.T) {
	f := newFixture(t, settings{DedupMaxEntries: 2})
	a, b, c := alertBody("a"), alertBody("b"), alertBody("c")
	f.expectOutcome(a, outcomeAccepted)
	f.expectOutcome(b, outcomeAccepted)
	f.expectOutcome(c, outcomeAccepted) // evicts a
	f.expectOutcome(c, outcomeDuplicate)
	f.expectOutcome(a, outcomeAccepted) // forgotten, evicts b
	f.expectOutcome(c, outcomeDuplicate)
	// The memory holds exactly two entries, the newest: a and c are
	// remembered (a duplicate changes nothing), b is not.
	f.expectOutcome(a, outcomeDuplicate)
	f.expectOutcome(c, outcomeDuplicate)
	f.expectOutcome(b, outcomeAccepted)
}

func TestConcurrentCopiesAcceptedOnce(t *testing.T) {
	f := newFixture(t, settings{})
	body := []byte(validAlert)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { f.post(body, testSecret) })
	}
	wg.Wait()
	if a, d := f.outcomeCount(outcomeAccepted), f.outcomeCount(outcomeDuplicate); a != 1 || d != 15 {
		t.Fatalf("accepted %v, duplicate %v; want 1 and 15", a, d)
	}
	if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 1 {
		t.Fatalf("alerts_total = %v, want 1", got)
	}
}

func TestMaxEventAge(t *testing.T) {
	// validAlert was observed one minute before testStart.
	f := newFixture(t, settings{MaxEventAge: 30 * time.Second})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeStale)
	if n := f.alertSeries(); n != 0 {
		t.Fatalf("a stale alert created %d series", n)
	}
	if n := f.watchlist.Len(); n != 0 {
		t.Fatalf("a stale alert made %d addresses watched", n)
	}
	// A stale body is not remembered: with a looser limit it is accepted.
	f.update(settings{MaxEventAge: 2 * time.Minute})
	f.expectOutcome(body, outcomeAccepted)
	// A duplicate that has also aged past the limit is a duplicate.
	f.clock.Advance(5 * time.Minute)
	f.expectOutcome(body, outcomeDuplicate)
	// Clock skew: an alert from the future is accepted.
	future := strings.Replace(validAlert, "2025-03-01T11:59:00Z", "2025-03-01T13:00:00Z", 1)
	f.expectOutcome([]byte(future), outcomeAccepted)
}

// An observed_at more than 5 minutes ahead of our clock is counted but does
// not move the last-observed gauge: a date far ahead would pin it for good.
func TestFutureObservedAtDoesNotMoveLastObserved(t *testing.T) {
	f := newFixture(t, settings{})
	at, lastObserved := observedAt, f.lastObserved
	// testStart is 12:00: five minutes ahead is still believed.
	f.expectOutcome(at("2025-03-01T12:05:00Z"), outcomeAccepted)
	if got, want := lastObserved(), float64(testStart.Add(5*time.Minute).Unix()); got != want {
		t.Fatalf("last observed = %v, want %v", got, want)
	}
	if got := f.sample("breach_webhook_alerts_future_observed_total"); got != 0 {
		t.Fatalf("future_observed = %v for an alert 5 minutes ahead, want 0", got)
	}
	f.expectOutcome(at("2025-03-01T12:05:01Z"), outcomeAccepted)
	f.expectOutcome(at("9999-12-31T23:59:59Z"), outcomeAccepted)
	if got, want := lastObserved(), float64(testStart.Add(5*time.Minute).Unix()); got != want {
		t.Fatalf("last observed = %v after alerts from the future, want %v", got, want)
	}
	if got := f.sample("breach_webhook_alerts_future_observed_total"); got != 2 {
		t.Fatalf("future_observed = %v, want 2", got)
	}
	if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 3 {
		t.Fatalf("alerts_total = %v, want all 3 alerts counted", got)
	}
}

func TestUpdateKeepsDedupMemory(t *testing.T) {
	f := newFixture(t, settings{})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeAccepted)
	f.update(settings{Secrets: [][]byte{otherSecret, testSecret}, DedupWindow: 2 * time.Hour})
	f.expectOutcome(body, outcomeDuplicate)
	// A shorter window applies to what is already remembered.
	f.clock.Advance(90 * time.Minute)
	f.expectOutcome(body, outcomeDuplicate)
	f.update(settings{DedupWindow: time.Hour})
	f.expectOutcome(body, outcomeAccepted)
}

func TestUpdateShrinksDedupKeepingNewest(t *testing.T) {
	f := newFixture(t, settings{})
	older, newer := alertBody("older"), alertBody("newer")
	f.expectOutcome(older, outcomeAccepted)
	f.expectOutcome(newer, outcomeAccepted)
	f.update(settings{DedupMaxEntries: 1})
	// Exactly one entry is left, the newest: newer is remembered, older is
	// not, and remembering older again leaves no room for newer.
	f.expectOutcome(newer, outcomeDuplicate)
	f.expectOutcome(older, outcomeAccepted)
	f.expectOutcome(newer, outcomeAccepted)
}

// Only breach_alerts_total exists before the first alert, for critical
// alerts of every known source of every watched address: the rules take
// increase() of it. The other alert families start with an address's first
// alert.
func TestConfiguredAddressesStartAtZero(t *testing.T) {
	f := newFixture(t, settings{Addresses: []string{"alice@example.com", "carol@example.com"}})
	counts := map[string]int{
		"breach_alerts_total":                          2 * 4,
		"breach_alert_new_databases_total":             0,
		"breach_alert_exposed_fields_total":            0,
		"breach_alert_new_plaintext_passwords_total":   0,
		"breach_alert_last_observed_timestamp_seconds": 0,
	}
	for name, want := range counts {
		if n, err := testutil.GatherAndCount(f.gatherer, name); err != nil || n != want {
			t.Errorf("%s: %d series (err %v), want %d", name, n, err, want)
		}
	}
	if got := f.alertCount("carol@example.com", "enriched", "critical"); got != 0 {
		t.Errorf("pre-initialised counter = %v", got)
	}
	// An alert creates its source's other series, new databases and new
	// plaintext passwords even when it adds none.
	f.expectOutcome(alertBodyFor("carol@example.com", "no delta"), outcomeAccepted)
	for name, want := range map[string]float64{
		"breach_alert_new_databases_total":           1, // new_source_dbs: ["x"]
		"breach_alert_new_plaintext_passwords_total": 0,
	} {
		if got := f.sample(name, "address", "carol@example.com", "source", "index"); got != want {
			t.Errorf("%s after carol's first alert = %v, want %v", name, got, want)
		}
	}
}

func TestLabelModeAndAddressChanges(t *testing.T) {
	configured := []string{"alice@example.com", "carol@example.com"}
	f := newFixture(t, settings{Addresses: configured})
	f.expectOutcome(alertBody("for bob, not configured"), outcomeAccepted)
	f.expectOutcome([]byte(validAlert), outcomeAccepted) // alice

	// carol leaves the config: every series of hers goes; alice's and
	// bob's counts stay.
	f.update(settings{Addresses: []string{"alice@example.com"}})
	assertAddresses(t, f, "breach_alerts_total", "alice@example.com", "bob@example.com")
	assertNoLabel(t, f, "carol@example.com")
	if got := f.alertCount("bob@example.com", "index", "warning"); got != 1 {
		t.Fatalf("bob's count = %v, want 1", got)
	}

	// A new label mode leaves no series under the old labels; the counts
	// are the address's, so they carry over under the new label.
	f.update(settings{Addresses: []string{"alice@example.com"}, LabelMode: breach.LabelHash})
	alice, bob := breach.HashLabel("alice@example.com"), breach.HashLabel("bob@example.com")
	assertAddresses(t, f, "breach_alerts_total", alice, bob)
	assertAddresses(t, f, "breach_alert_last_observed_timestamp_seconds", alice, bob)
	assertNoLabel(t, f, "alice@example.com")
	assertNoLabel(t, f, "bob@example.com")
	if got := f.alertCount(alice, "combolist", "critical"); got != 1 {
		t.Fatalf("alice's count under the hash label = %v, want 1 carried over", got)
	}
	f.expectOutcome(alertBody("for bob, after the change"), outcomeAccepted)
	assertAddresses(t, f, "breach_alerts_total", alice, bob)
	if got := f.alertCount(bob, "index", "warning"); got != 2 {
		t.Fatalf("bob's count under the hash label = %v, want 2", got)
	}

	// Discovery off: the discovered bob goes with every series of his.
	f.update(settings{Addresses: []string{"alice@example.com"}, LabelMode: breach.LabelHash, NoDiscovery: true})
	assertAddresses(t, f, "breach_alerts_total", alice)
	assertNoLabel(t, f, bob)
}

// assertAddresses checks the distinct address label values of a family.
func assertAddresses(t *testing.T, f *fixture, family string, want ...string) {
	t.Helper()
	families, err := f.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range families {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "address" {
					got[l.GetValue()] = true
				}
			}
		}
	}
	wantSet := map[string]bool{}
	for _, w := range want {
		wantSet[w] = true
	}
	if !reflect.DeepEqual(got, wantSet) {
		t.Fatalf("%s addresses = %v, want %v", family, got, wantSet)
	}
}

// assertNoLabel checks that no served series, of any family, has a label
// whose value is value.
func assertNoLabel(t *testing.T, f *fixture, value string) {
	t.Helper()
	families, err := f.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == value {
					t.Fatalf("%s{%s=%q} is still served", mf.GetName(), l.GetName(), value)
				}
			}
		}
	}
}

// An alert for an address that is not watched and may not be discovered is
// counted without an address label, by reason.
func TestUntrackedAlerts(t *testing.T) {
	untracked := func(t *testing.T, f *fixture, off, limit float64) {
		t.Helper()
		for reason, want := range map[string]float64{"discovery_off": off, "discovery_limit": limit} {
			if got := f.sample("breach_webhook_alerts_untracked_total", "reason", reason); got != want {
				t.Errorf("untracked{%s} = %v, want %v", reason, got, want)
			}
		}
	}
	t.Run("discovery off", func(t *testing.T) {
		f := newFixture(t, settings{Addresses: []string{"alice@example.com"}, NoDiscovery: true})
		f.expectOutcome(alertBody("for bob"), outcomeAccepted)
		f.expectOutcome([]byte(validAlert), outcomeAccepted)
		untracked(t, f, 1, 0)
		if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 1 {
			t.Errorf("alice's count = %v, want 1", got)
		}
		assertNoLabel(t, f, "bob@example.com")
		if got := f.queued(); !slices.Equal(got, []string{"alice@example.com"}) {
			t.Errorf("queued for a re-read: %v, want alice only", got)
		}
	})
	t.Run("discovery limit", func(t *testing.T) {
		f := newFixture(t, settings{Addresses: []string{"alice@example.com"}, MaxDiscovered: 1})
		f.expectOutcome(alertBody("for bob"), outcomeAccepted)
		f.expectOutcome(alertBodyFor("carol@example.com", "for carol"), outcomeAccepted)
		f.expectOutcome(alertBody("for bob again"), outcomeAccepted)
		f.expectOutcome([]byte(validAlert), outcomeAccepted)
		untracked(t, f, 0, 1)
		if got := f.alertCount("bob@example.com", "index", "warning"); got != 2 {
			t.Errorf("bob's count = %v, want 2", got)
		}
		if got := f.alertCount("alice@example.com", "combolist", "critical"); got != 1 {
			t.Errorf("alice's count = %v, want 1", got)
		}
		assertNoLabel(t, f, "carol@example.com")
	})
}

// An alert verified by the secret of an account a reload has removed since
// (replayed from the journal, or applied from the stream of a replica that
// still has the account) counts as removed_account, whatever discovery
// says: it was neither refused by the discovery limit nor by discovery
// being off. Before, it counted as discovery_limit (or discovery_off), and
// as other_account for an address another account watches.
func TestAlertsOfARemovedAccount(t *testing.T) {
	for name, s := range map[string]settings{
		"discovery on":  {Addresses: []string{"alice@example.com"}},
		"discovery off": {Addresses: []string{"alice@example.com"}, NoDiscovery: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, s)
			for i, address := range []string{"bob@example.com", "alice@example.com"} {
				f.h.Replay(watchlist.AcceptedAlert{Digest: [32]byte{byte(i + 1)}, At: f.clock.Now(), Account: "gone", Address: address,
					Delta: watchlist.AlertDelta{Source: "index", Severity: "warning"}})
			}
			for reason, want := range map[string]float64{"removed_account": 2, "discovery_off": 0, "discovery_limit": 0, "other_account": 0} {
				if got := f.sample("breach_webhook_alerts_untracked_total", "reason", reason); got != want {
					t.Errorf("untracked{%s} = %v, want %v", reason, got, want)
				}
			}
			if got := f.alertCount("alice@example.com", "index", "warning"); got > 0 {
				t.Errorf("alice's count = %v, want none", got)
			}
			assertNoLabel(t, f, "bob@example.com")
		})
	}
}

// An alert belongs to the account whose secret verifies it: counted for
// its own account's address, discovered into that account, and never
// counted for another account's address.
func TestAlertsBelongToTheirAccount(t *testing.T) {
	f := newFixture(t, settings{Addresses: []string{"alice@example.com"}, LabsAddresses: []string{"bob@example.com"}})
	post := func(body, secret []byte) {
		t.Helper()
		if rec := f.post(body, secret); rec.Code != http.StatusNoContent {
			t.Fatalf("status %d, want 204", rec.Code)
		}
	}
	post(alertBodyFor("alice@example.com", "default's own"), testSecret)
	post(alertBodyFor("bob@example.com", "labs' own"), labsSecret)
	post(alertBodyFor("bob@example.com", "default's secret, labs' address"), testSecret)
	post(alertBodyFor("alice@example.com", "labs' secret, default's address"), labsSecret)
	post(alertBodyFor("carol@example.com", "discovered by labs"), labsSecret)

	for _, address := range []string{"alice@example.com", "bob@example.com", "carol@example.com"} {
		if got := f.alertCount(address, "index", "warning"); got != 1 {
			t.Errorf("%s: %v alerts counted, want 1 (its own account's)", address, got)
		}
	}
	if got := f.sample("breach_webhook_alerts_untracked_total", "reason", "other_account"); got != 2 {
		t.Errorf("untracked{other_account} = %v, want 2", got)
	}
	for _, want := range []struct{ address, account string }{
		{"alice@example.com", breach.DefaultAccount}, {"bob@example.com", "labs"}, {"carol@example.com", "labs"},
	} {
		if got := f.sample("breach_address_state", "address", want.address, "account", want.account, "state", breach.Pending); got != 1 {
			t.Errorf("%s is not in account %s: breach_address_state = %v", want.address, want.account, got)
		}
	}
	// A restart keeps the count.
	if c := f.h.Counts(); c.UntrackedOtherAccount != 2 {
		t.Errorf("Counts().UntrackedOtherAccount = %v, want 2", c.UntrackedOtherAccount)
	}
}

// observedAt is validAlert observed at ts.
func observedAt(ts string) []byte {
	return []byte(strings.Replace(validAlert, "2025-03-01T11:59:00Z", ts, 1))
}

// lastObserved is alice's last-observed gauge for validAlert's feed.
func (f *fixture) lastObserved() float64 {
	return f.sample("breach_alert_last_observed_timestamp_seconds", "address", "alice@example.com", "source", "combolist")
}

func TestLastObservedNeverMovesBack(t *testing.T) {
	f := newFixture(t, settings{})
	at, gauge := observedAt, f.lastObserved
	f.expectOutcome(at("2025-03-01T11:00:00Z"), outcomeAccepted)
	f.expectOutcome(at("2025-03-01T10:00:00Z"), outcomeAccepted)
	if got, want := gauge(), float64(time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC).Unix()); got != want {
		t.Fatalf("last observed = %v, want %v", got, want)
	}
	f.expectOutcome(at("2025-03-01T11:30:00.5Z"), outcomeAccepted)
	if got, want := gauge(), float64(time.Date(2025, 3, 1, 11, 30, 0, 0, time.UTC).Unix())+0.5; got != want {
		t.Fatalf("last observed = %v, want %v", got, want)
	}
}

func TestUnknownValuesCountedAndSanitised(t *testing.T) {
	f := newFixture(t, settings{})
	long := strings.Repeat("é", 100) // 200 bytes
	body := fmt.Appendf(nil, `{"event":"alert.created","severity":"urgent","address":"dave@example.com",`+
		`"source":%q,"delta":{"newly_exposed_fields":["iban","iban","bad`+"\xff"+`utf8"]},"observed_at":"2025-03-01T11:59:00Z"}`, long)
	f.expectOutcome(body, outcomeAccepted)
	source := strings.Repeat("é", breach.MaxSourceBytes/2) // cut to 64 bytes on a rune boundary
	if got := f.alertCount("dave@example.com", source, "urgent"); got != 1 {
		t.Errorf("alerts_total for an unknown severity and a long source = %v, want 1", got)
	}
	field := func(name string) float64 {
		return f.sample("breach_alert_exposed_fields_total", "address", "dave@example.com", "source", source, "field", name)
	}
	if got := field("iban"); got != 2 {
		t.Errorf("exposed_fields_total{field=iban} = %v, want 2 (one per entry)", got)
	}
	if got := field("bad\uFFFDutf8"); got != 1 {
		t.Errorf("invalid UTF-8 field not counted under its replacement: %v", got)
	}
}

// The receiver makes label values of what the sender wrote with
// breach.LabelValue.
func TestLabelValue(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 10, "plain"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is two bytes: never cut inside it
		{"a\xffb", 10, "a\uFFFDb"},
	}
	for _, tc := range cases {
		if got := breach.LabelValue(tc.in, tc.max); got != tc.want {
			t.Errorf("LabelValue(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
