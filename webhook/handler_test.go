package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAcceptedAlertCountsAndCallsBack(t *testing.T) {
	f := newFixture(t, Settings{})
	rec := f.post([]byte(validAlert), testSecret)
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("got %d %q, want 204 with an empty body", rec.Code, rec.Body)
	}

	const expected = `
# HELP breach_alerts_total Accepted alert.created webhooks.
# TYPE breach_alerts_total counter
breach_alerts_total{address="alice@example.com",severity="critical",source="combolist"} 1
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
breach_webhook_requests_total{outcome="stale"} 0
breach_webhook_requests_total{outcome="too_large"} 0
breach_webhook_requests_total{outcome="unknown_event"} 0
breach_webhook_requests_total{outcome="unsupported_media_type"} 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(expected),
		append([]string{"breach_webhook_requests_total"}, alertFamilies...)...); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(f.reg, "breach_webhook_request_duration_seconds"); n != 1 {
		t.Fatalf("duration histogram series = %d, want 1", n)
	}

	want := Alert{
		Event: "alert.created", Severity: "critical", Address: "alice@example.com", Source: "combolist",
		Summary: "2 new databases",
		Delta: Delta{PreviousCount: 3, NewCount: 5, NewSourceDBs: []string{"db-one", "db-two"},
			NewlyExposedFields: []string{"password", "phone"}, HasNewPlaintext: true},
		ObservedAt:   time.Date(2025, 3, 1, 11, 59, 0, 0, time.UTC),
		DashboardURL: "https://service.example/dashboard/a/1",
	}
	if got := f.alerts(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("onAlert got %+v, want one %+v", got, want)
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
			"sha256=" + strings.ToUpper(strings.TrimPrefix(sign(testSecret, signed), "sha256="))}}, 401, outcomeInvalidSignature},
		{"uppercase prefix", request{body: signed, signatures: []string{
			"SHA256=" + strings.TrimPrefix(sign(testSecret, signed), "sha256=")}}, 401, outcomeInvalidSignature},
		{"bare hex", request{body: signed, signatures: []string{
			strings.TrimPrefix(sign(testSecret, signed), "sha256=")}}, 401, outcomeInvalidSignature},
		{"short hex", request{body: signed, signatures: []string{sign(testSecret, signed)[:len("sha256=")+63]}}, 401, outcomeInvalidSignature},
		{"trailing space in header", request{body: signed, signatures: []string{sign(testSecret, signed) + " "}}, 401, outcomeInvalidSignature},
		{"wrong secret", request{body: signed, signatures: []string{sign([]byte("wrong"), signed)}}, 401, outcomeInvalidSignature},
		{"two signature headers", request{body: signed, signatures: []string{sign(testSecret, signed), sign(testSecret, signed)}}, 401, outcomeInvalidSignature},
		{"trailing whitespace added after signing", request{body: append(append([]byte(nil), signed...), '\n'),
			signatures: []string{sign(testSecret, signed)}}, 401, outcomeInvalidSignature},
		{"trailing whitespace removed after signing", request{body: signed,
			signatures: []string{sign(testSecret, append(append([]byte(nil), signed...), '\n'))}}, 401, outcomeInvalidSignature},
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Settings{MaxBodyBytes: maxBody})
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
				req.Header.Set(SignatureHeader, sign(testSecret, tc.req.body))
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
			if n := len(f.alerts()); (n == 1) != accepted || n > 1 {
				t.Errorf("onAlert called %d times for outcome %s", n, tc.outcome)
			}
		})
	}
}

func TestSecretRotation(t *testing.T) {
	f := newFixture(t, Settings{Secrets: [][]byte{otherSecret, testSecret}})
	if rec := f.post(alertBody("signed with the old secret"), otherSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("old secret: %d", rec.Code)
	}
	if rec := f.post(alertBody("signed with the new secret"), testSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("new secret: %d", rec.Code)
	}
	if got := f.outcomeCount(outcomeAccepted); got != 2 {
		t.Fatalf("accepted = %v, want 2", got)
	}

	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}}); err != nil {
		t.Fatal(err)
	}
	if rec := f.post(alertBody("old secret after its removal"), otherSecret); rec.Code != http.StatusUnauthorized {
		t.Fatalf("removed secret: %d, want 401", rec.Code)
	}
	if rec := f.post(alertBody("new secret after the removal"), testSecret); rec.Code != http.StatusNoContent {
		t.Fatalf("kept secret: %d, want 204", rec.Code)
	}
}

func TestSettingsRejected(t *testing.T) {
	bad := map[string]Settings{
		"no secret":              {},
		"empty secret":           {Secrets: [][]byte{testSecret, {}}},
		"negative body cap":      {Secrets: [][]byte{testSecret}, MaxBodyBytes: -1},
		"negative dedup window":  {Secrets: [][]byte{testSecret}, DedupWindow: -time.Second},
		"negative dedup entries": {Secrets: [][]byte{testSecret}, DedupMaxEntries: -1},
		"negative max event age": {Secrets: [][]byte{testSecret}, MaxEventAge: -time.Second},
	}
	f := newFixture(t, Settings{})
	for name, s := range bad {
		if _, err := NewHandler(prometheus.NewRegistry(), clockwork.NewFakeClock(), log.NewNopLogger(), nil, s); err == nil {
			t.Errorf("NewHandler accepted %s", name)
		}
		if err := f.h.Update(s); err == nil {
			t.Errorf("Update accepted %s", name)
		}
	}
	// A refused update changes nothing.
	f.expectOutcome([]byte(validAlert), outcomeAccepted)
}

func TestSecretsAreCopied(t *testing.T) {
	secret := append([]byte(nil), testSecret...)
	f := newFixture(t, Settings{Secrets: [][]byte{secret}})
	secret[0] ^= 0xff
	f.expectOutcome([]byte(validAlert), outcomeAccepted)
}

func TestDuplicateWithinWindowThenExpiry(t *testing.T) {
	f := newFixture(t, Settings{DedupWindow: time.Hour})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeAccepted)
	f.clock.Advance(time.Hour - time.Second)
	f.expectOutcome(body, outcomeDuplicate)
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("alice@example.com", "combolist", "critical")); got != 1 {
		t.Fatalf("alerts_total = %v after a duplicate, want 1", got)
	}
	if n := len(f.alerts()); n != 1 {
		t.Fatalf("onAlert called %d times, want 1", n)
	}

	f.clock.Advance(time.Second)
	f.expectOutcome(body, outcomeAccepted)
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("alice@example.com", "combolist", "critical")); got != 2 {
		t.Fatalf("alerts_total = %v after the window, want 2", got)
	}
}

func TestDedupEvictsOldestAtCapacity(t *testing.T) {
	f := newFixture(t, Settings{DedupMaxEntries: 2})
	a, b, c := alertBody("a"), alertBody("b"), alertBody("c")
	f.expectOutcome(a, outcomeAccepted)
	f.expectOutcome(b, outcomeAccepted)
	f.expectOutcome(c, outcomeAccepted) // evicts a
	f.expectOutcome(c, outcomeDuplicate)
	f.expectOutcome(a, outcomeAccepted) // forgotten, evicts b
	f.expectOutcome(c, outcomeDuplicate)
	if n := f.h.dedup.len(); n != 2 {
		t.Fatalf("dedup holds %d entries, want 2", n)
	}
}

func TestConcurrentCopiesAcceptedOnce(t *testing.T) {
	f := newFixture(t, Settings{})
	body := []byte(validAlert)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { f.post(body, testSecret) })
	}
	wg.Wait()
	if a, d := f.outcomeCount(outcomeAccepted), f.outcomeCount(outcomeDuplicate); a != 1 || d != 15 {
		t.Fatalf("accepted %v, duplicate %v; want 1 and 15", a, d)
	}
}

func TestMaxEventAge(t *testing.T) {
	// validAlert was observed one minute before testStart.
	f := newFixture(t, Settings{MaxEventAge: 30 * time.Second})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeStale)
	if n := f.alertSeries(); n != 0 {
		t.Fatalf("a stale alert created %d series", n)
	}
	if n := len(f.alerts()); n != 0 {
		t.Fatalf("onAlert called for a stale alert")
	}
	// A stale body is not remembered: with a looser limit it is accepted.
	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}, MaxEventAge: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	f.expectOutcome(body, outcomeAccepted)
	// A duplicate that has also aged past the limit is a duplicate.
	f.clock.Advance(5 * time.Minute)
	f.expectOutcome(body, outcomeDuplicate)
	// Clock skew: an alert from the future is accepted.
	future := strings.Replace(validAlert, "2025-03-01T11:59:00Z", "2025-03-01T13:00:00Z", 1)
	f.expectOutcome([]byte(future), outcomeAccepted)
}

func TestUpdateKeepsDedupMemory(t *testing.T) {
	f := newFixture(t, Settings{})
	body := []byte(validAlert)
	f.expectOutcome(body, outcomeAccepted)
	if err := f.h.Update(Settings{Secrets: [][]byte{otherSecret, testSecret}, DedupWindow: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.expectOutcome(body, outcomeDuplicate)
	// A shorter window applies to what is already remembered.
	f.clock.Advance(90 * time.Minute)
	f.expectOutcome(body, outcomeDuplicate)
	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}, DedupWindow: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.expectOutcome(body, outcomeAccepted)
}

func TestUpdateShrinksDedupKeepingNewest(t *testing.T) {
	f := newFixture(t, Settings{})
	older, newer := alertBody("older"), alertBody("newer")
	f.expectOutcome(older, outcomeAccepted)
	f.expectOutcome(newer, outcomeAccepted)
	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}, DedupMaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	if n := f.h.dedup.len(); n != 1 {
		t.Fatalf("dedup holds %d entries after shrinking to 1", n)
	}
	f.expectOutcome(newer, outcomeDuplicate)
	f.expectOutcome(older, outcomeAccepted)
}

func TestConfiguredAddressesStartAtZero(t *testing.T) {
	f := newFixture(t, Settings{Addresses: []string{"alice@example.com", "carol@example.com"}})
	counts := map[string]int{
		"breach_alerts_total":                          2 * 4 * 3,
		"breach_alert_new_databases_total":             0,
		"breach_alert_exposed_fields_total":            0,
		"breach_alert_new_plaintext_passwords_total":   0,
		"breach_alert_last_observed_timestamp_seconds": 0,
	}
	for name, want := range counts {
		if n, err := testutil.GatherAndCount(f.reg, name); err != nil || n != want {
			t.Errorf("%s: %d series (err %v), want %d", name, n, err, want)
		}
	}
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("carol@example.com", "enriched", "info")); got != 0 {
		t.Errorf("pre-initialised counter = %v", got)
	}
}

func TestLabelModeAndAddressChanges(t *testing.T) {
	upper := func(s string) string { return strings.ToUpper(s) }
	f := newFixture(t, Settings{Addresses: []string{"alice@example.com", "carol@example.com"}})
	f.expectOutcome(alertBody("for bob, not configured"), outcomeAccepted)
	f.expectOutcome([]byte(validAlert), outcomeAccepted) // alice

	// carol leaves the config: her zero series go; alice's and bob's
	// counts stay.
	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}, Addresses: []string{"alice@example.com"}}); err != nil {
		t.Fatal(err)
	}
	assertAddresses(t, f, "breach_alerts_total", "alice@example.com", "bob@example.com")
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("bob@example.com", "index", "warning")); got != 1 {
		t.Fatalf("bob's count = %v, want 1", got)
	}

	// A new label mode leaves no series under the old labels.
	if err := f.h.Update(Settings{Secrets: [][]byte{testSecret}, Addresses: []string{"alice@example.com"}, Label: upper}); err != nil {
		t.Fatal(err)
	}
	assertAddresses(t, f, "breach_alerts_total", "ALICE@EXAMPLE.COM")
	assertAddresses(t, f, "breach_alert_last_observed_timestamp_seconds")
	f.expectOutcome(alertBody("for bob, after the change"), outcomeAccepted)
	assertAddresses(t, f, "breach_alerts_total", "ALICE@EXAMPLE.COM", "BOB@EXAMPLE.COM")
	assertAddresses(t, f, "breach_alert_last_observed_timestamp_seconds", "BOB@EXAMPLE.COM")
}

// assertAddresses checks the distinct address label values of a family.
func assertAddresses(t *testing.T, f *fixture, family string, want ...string) {
	t.Helper()
	families, err := f.reg.Gather()
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

func TestLastObservedNeverMovesBack(t *testing.T) {
	f := newFixture(t, Settings{})
	at := func(ts string) []byte {
		return []byte(strings.Replace(validAlert, "2025-03-01T11:59:00Z", ts, 1))
	}
	f.expectOutcome(at("2025-03-01T11:00:00Z"), outcomeAccepted)
	f.expectOutcome(at("2025-03-01T10:00:00Z"), outcomeAccepted)
	gauge := f.h.metrics.lastObservedAt.WithLabelValues("alice@example.com", "combolist")
	if got, want := testutil.ToFloat64(gauge), float64(time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC).Unix()); got != want {
		t.Fatalf("last observed = %v, want %v", got, want)
	}
	f.expectOutcome(at("2025-03-01T11:30:00.5Z"), outcomeAccepted)
	if got, want := testutil.ToFloat64(gauge), float64(time.Date(2025, 3, 1, 11, 30, 0, 0, time.UTC).Unix())+0.5; got != want {
		t.Fatalf("last observed = %v, want %v", got, want)
	}
}

func TestUnknownValuesCountedAndSanitised(t *testing.T) {
	f := newFixture(t, Settings{})
	long := strings.Repeat("é", 100) // 200 bytes
	body := fmt.Appendf(nil, `{"event":"alert.created","severity":"urgent","address":"dave@example.com",`+
		`"source":%q,"delta":{"newly_exposed_fields":["iban","iban","bad`+"\xff"+`utf8"]},"observed_at":"2025-03-01T11:59:00Z"}`, long)
	f.expectOutcome(body, outcomeAccepted)
	source := strings.Repeat("é", 64) // cut to 128 bytes on a rune boundary
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("dave@example.com", source, "urgent")); got != 1 {
		t.Errorf("alerts_total for an unknown severity and a long source = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.h.metrics.exposedFields.WithLabelValues("dave@example.com", source, "iban")); got != 2 {
		t.Errorf("exposed_fields_total{field=iban} = %v, want 2 (one per entry)", got)
	}
	if got := testutil.ToFloat64(f.h.metrics.exposedFields.WithLabelValues("dave@example.com", source, "bad\uFFFDutf8")); got != 1 {
		t.Errorf("invalid UTF-8 field not counted under its replacement: %v", got)
	}
}

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
		if got := labelValue(tc.in, tc.max); got != tc.want {
			t.Errorf("labelValue(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
