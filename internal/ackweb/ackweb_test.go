// SPDX-License-Identifier: Apache-2.0

package ackweb_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

const alice = "alice@example.com"

// fixture is a real exporter (never run: no API is called) whose
// watchlist holds alice with the combolist feed, and the page over it.
type fixture struct {
	t     *testing.T
	exp   *exporter.Exporter
	h     *ackweb.Handler
	reg   *prometheus.Registry
	logs  *testkit.SyncBuffer
	label string // alice's address label
	dir   string
}

// newFixture starts an exporter with configTail after the config's api
// section, and a page with o (Watchlist, Config, Store, Registerer and
// Logger filled in).
func newFixture(t *testing.T, configTail string, o ackweb.Options) *fixture {
	t.Helper()
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken)
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), "api:\n  base_url: http://127.0.0.1:9/\n  token_file: token\naddresses:\n  - email: "+alice+"\n    labels: {team: payments, owner: jdoe}\n"+configTail)
	f := &fixture{t: t, reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}, dir: dir}
	exp, err := exporter.New(exporter.Options{ConfigFile: filepath.Join(dir, "config.yml"), Registerer: f.reg,
		StoragePath: filepath.Join(dir, "data"), SnapshotInterval: time.Minute, Logger: log.NewLogfmtLogger(f.logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	f.exp = exp
	now := time.Now()
	exp.Watchlist().Answered(breach.Key(alice), breach.Verified, []breach.SourceState{{Source: "combolist", BreachCount: 2,
		FieldsExposed: []string{"email", "password"}, HasPlaintextPassword: true, LastScannedAt: now, LastChangedAt: now.Add(-time.Hour)}}, now)
	for _, e := range exp.Watchlist().View().Entries {
		f.label = e.Label
	}
	o.Watchlist, o.Config, o.Store, o.Registerer, o.Logger = exp.Watchlist(), exp.Config(), exp, f.reg, log.NewLogfmtLogger(f.logs)
	if f.h, err = ackweb.New(o); err != nil {
		t.Fatal(err)
	}
	return f
}

func basic() ackweb.Options {
	return ackweb.Options{Write: true, Auth: ackweb.Auth{BasicAuth: true}}
}

// do serves one request; user, when set, is its basic-auth user (the
// toolkit checked the password: TestToolkitChecksPasswords).
func (f *fixture) do(method, target, contentType, body, user string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if user != "" {
		req.SetBasicAuth(user, "checked-by-the-toolkit")
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// proxied serves a POST to target whose X-Forwarded-User header names
// user, from the address remote.
func (f *fixture) proxied(target, contentType, body, user, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Forwarded-User", user)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func (f *fixture) postJSON(body, user string) *httptest.ResponseRecorder {
	return f.do(http.MethodPost, ackweb.APIPath, "application/json", body, user)
}

func (f *fixture) refused(reason string) float64 {
	return f.counter("breach_exporter_acknowledgement_writes_refused_total", reason)
}

func (f *fixture) changes(action string) float64 {
	return f.counter("breach_exporter_acknowledgement_changes_total", action)
}

// counter is the value of the series of the counter name whose one label
// has value.
func (f *fixture) counter(name, value string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	f.t.Fatalf("no series %s with the label value %q", name, value)
	return 0
}

// list is GET of the API.
func (f *fixture) list() []map[string]any {
	f.t.Helper()
	rec := f.do(http.MethodGet, ackweb.APIPath, "", "", "")
	if rec.Code != http.StatusOK {
		f.t.Fatalf("GET %s = %d", ackweb.APIPath, rec.Code)
	}
	var answer struct {
		Acknowledgements []map[string]any `json:"acknowledgements"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		f.t.Fatal(err)
	}
	return answer.Acknowledgements
}

var tokenField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// form opens alice's page as user and returns its token and cookie.
func (f *fixture) form(user string) (string, *http.Cookie) {
	f.t.Helper()
	rec := f.do(http.MethodGet, ackweb.PagePath+"?address="+url.QueryEscape(f.label)+"&source=combolist", "", "", user)
	if rec.Code != http.StatusOK {
		f.t.Fatalf("GET the page = %d:\n%s", rec.Code, rec.Body)
	}
	m := tokenField.FindStringSubmatch(rec.Body.String())
	cookies := rec.Result().Cookies()
	if m == nil || len(cookies) != 1 || cookies[0].SameSite != http.SameSiteStrictMode || !cookies[0].HttpOnly {
		f.t.Fatalf("the page has no form token or no strict HttpOnly cookie (cookies %v):\n%s", cookies, rec.Body)
	}
	return m[1], cookies[0]
}

func formBody(values map[string]string) string {
	v := url.Values{}
	for k, x := range values {
		v.Set(k, x)
	}
	return v.Encode()
}

const formType = "application/x-www-form-urlencoded"

// The form acknowledges, the list and the API show it as the page's, the
// change is counted and has an audit line; the withdraw button removes it.
func TestFormAcknowledgesAndWithdraws(t *testing.T) {
	f := newFixture(t, "", basic())
	token, cookie := f.form("oncall")
	rec := f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": f.label,
		"source": "combolist", "by": "Ada", "comment": "password reset", "csrf_token": token}), "oncall", cookie)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "acknowledgements" {
		t.Fatalf("POST the form = %d, Location %q:\n%s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	got := f.list()
	if len(got) != 1 {
		t.Fatalf("listed %v, want alice's combolist", got)
	}
	ack := got[0]["acknowledgement"].(map[string]any)
	if got[0]["address"] != f.label || ack["origin"] != "page" || ack["by"] != "Ada" || ack["covers"] != true {
		t.Errorf("listed %v, want alice's combolist acknowledged on the page by Ada, covering", got[0])
	}
	if f.changes("acknowledge") != 1 {
		t.Errorf("acknowledge changes = %v, want 1", f.changes("acknowledge"))
	}
	logs := f.logs.String()
	for _, want := range []string{`action=acknowledge`, `user=oncall`, `auth=basic_auth`, `by=Ada`, `source=combolist`, `remote=`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the audit line has no %s:\n%s", want, logs)
		}
	}
	page := f.do(http.MethodGet, ackweb.ListPath, "", "", "oncall")
	if !strings.Contains(page.Body.String(), "Withdraw this acknowledgement") {
		t.Fatalf("the list offers no withdrawal of the page's entry:\n%s", page.Body)
	}
	rec = f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "withdraw", "address": f.label,
		"source": "combolist", "csrf_token": token}), "oncall", cookie)
	if rec.Code != http.StatusSeeOther || len(f.list()) != 0 || f.changes("withdraw") != 1 {
		t.Errorf("withdraw = %d, listed %v, withdraw changes %v; want 303, none, 1", rec.Code, f.list(), f.changes("withdraw"))
	}
}

// Under labels.address: hash neither the page, nor the list, nor the API,
// nor the audit line shows the clear address; the API takes the label and
// the clear address alike.
func TestNoClearAddressOutsideEmailMode(t *testing.T) {
	f := newFixture(t, "labels:\n  address: hash\n", basic())
	if f.label == alice || !strings.HasPrefix(f.label, "sha256:") && !strings.Contains(f.label, ":") {
		t.Fatalf("label %q: want a hash", f.label)
	}
	if rec := f.postJSON(`{"address":"`+f.label+`","source":"combolist","by":"Ada","comment":"reset"}`, "oncall"); rec.Code != http.StatusCreated {
		t.Fatalf("POST by label = %d: %s", rec.Code, rec.Body)
	}
	rec := f.postJSON(`{"address":"Alice@Example.com","source":"","by":"Bo"}`, "oncall")
	if rec.Code != http.StatusCreated || strings.Contains(strings.ToLower(rec.Body.String()), alice) || !strings.Contains(rec.Body.String(), `"by":"Bo"`) {
		t.Fatalf("POST by the clear address = %d: %s; want 201 with the entry for every feed in force", rec.Code, rec.Body)
	}
	for _, body := range []string{
		f.do(http.MethodGet, ackweb.ListPath, "", "", "oncall").Body.String(),
		f.do(http.MethodGet, ackweb.PagePath+"?address="+url.QueryEscape(f.label), "", "", "oncall").Body.String(),
		f.do(http.MethodGet, ackweb.APIPath, "", "", "").Body.String(),
		f.logs.String(),
	} {
		if strings.Contains(strings.ToLower(body), alice) {
			t.Errorf("the clear address is shown:\n%s", body)
		}
	}
}

// The API: POST acknowledges (201, the row), DELETE withdraws the page's
// entry (204, then 404), and a file's entry stays (409) and is in force
// again once the page's later one is withdrawn.
func TestAPI(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "acks.yml"), "acknowledgements:\n  - address: "+alice+"\n    source: combolist\n    handled_at: 2026-01-01T00:00:00Z\n    by: file-author\n")
	f := newFixture(t, "acknowledgements_file: "+filepath.Join(dir, "acks.yml")+"\n", basic())
	if got := f.list(); len(got) != 1 || got[0]["acknowledgement"].(map[string]any)["origin"] != "file" {
		t.Fatalf("listed %v, want the file's entry", got)
	}
	rec := f.postJSON(`{"address":"`+alice+`","source":"combolist","by":"bot","comment":"rotated"}`, "chatops")
	var row map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &row); rec.Code != http.StatusCreated || err != nil {
		t.Fatalf("POST = %d: %s", rec.Code, rec.Body)
	}
	if a := row["acknowledgement"].(map[string]any); a["origin"] != "page" || a["by"] != "bot" {
		t.Errorf("POST answered %v, want the page's entry in force (the latest handled_at)", row)
	}
	if owner, _ := json.Marshal(row["owner"]); string(owner) != `[{"name":"owner","value":"jdoe"},{"name":"team","value":"payments"}]` {
		t.Errorf("POST answered the owner labels %s, want the address's (whom the page concerns)", owner)
	}
	page := f.do(http.MethodGet, ackweb.PagePath+"?address="+url.QueryEscape(alice), "", "", "chatops").Body.String()
	if !strings.Contains(page, "<dt>team</dt><dd>payments</dd>") {
		t.Errorf("the page does not show the owner labels:\n%s", page)
	}
	del := ackweb.APIPath + "?address=" + url.QueryEscape(alice) + "&source=combolist"
	if rec := f.do(http.MethodDelete, del, "", "", "chatops"); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE = %d: %s", rec.Code, rec.Body)
	}
	if got := f.list(); len(got) != 1 || got[0]["acknowledgement"].(map[string]any)["by"] != "file-author" {
		t.Errorf("after DELETE listed %v, want the file's entry in force again", got)
	}
	if rec := f.do(http.MethodDelete, del, "", "", "chatops"); rec.Code != http.StatusConflict {
		t.Errorf("DELETE of the file's entry = %d, want 409", rec.Code)
	}
	if rec := f.do(http.MethodDelete, ackweb.APIPath+"?address=nobody%40example.com", "", "", "chatops"); rec.Code != http.StatusNotFound {
		t.Errorf("DELETE for an address not watched = %d, want 404", rec.Code)
	}
}

// Every refusal has its status and its count, and changes nothing.
func TestRefusals(t *testing.T) {
	good := `{"address":"` + alice + `","source":"combolist","by":"Ada"}`
	proxied := ackweb.Options{Write: true, Auth: ackweb.Auth{UserHeader: "X-Forwarded-User", Proxies: mustProxies(t, "10.0.0.1")}}
	for _, c := range []struct {
		name   string
		o      ackweb.Options
		req    func(*fixture) *httptest.ResponseRecorder
		status int
		reason string
	}{
		{"writing off", ackweb.Options{Auth: ackweb.Auth{BasicAuth: true}}, func(f *fixture) *httptest.ResponseRecorder { return f.postJSON(good, "oncall") }, 403, "disabled"},
		{"no auth configured", ackweb.Options{Write: true}, func(f *fixture) *httptest.ResponseRecorder { return f.postJSON(good, "oncall") }, 401, "unauthenticated"},
		{"no user", basic(), func(f *fixture) *httptest.ResponseRecorder { return f.postJSON(good, "") }, 401, "unauthenticated"},
		{"header from an address that is no proxy", proxied, func(f *fixture) *httptest.ResponseRecorder {
			return f.proxied(ackweb.APIPath, "application/json", good, "mallory", "127.0.0.1:40000")
		}, 403, "untrusted_proxy"},
		{"cross-site", basic(), func(f *fixture) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, ackweb.APIPath, strings.NewReader(good))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			req.SetBasicAuth("oncall", "x")
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			return rec
		}, 403, "cross_site"},
		{"API without a JSON content type", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.do(http.MethodPost, ackweb.APIPath, "text/plain", good, "oncall")
		}, 415, "csrf"},
		{"form without a token", basic(), func(f *fixture) *httptest.ResponseRecorder {
			_, cookie := f.form("oncall")
			return f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada"}), "oncall", cookie)
		}, 403, "csrf"},
		{"form with a wrong token", basic(), func(f *fixture) *httptest.ResponseRecorder {
			_, cookie := f.form("oncall")
			return f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada", "csrf_token": "forged"}), "oncall", cookie)
		}, 403, "csrf"},
		{"form with another user's token", basic(), func(f *fixture) *httptest.ResponseRecorder {
			token, cookie := f.form("oncall")
			return f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada", "csrf_token": token}), "mallory", cookie)
		}, 403, "csrf"},
		{"form without the cookie", basic(), func(f *fixture) *httptest.ResponseRecorder {
			token, _ := f.form("oncall")
			return f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada", "csrf_token": token}), "oncall")
		}, 403, "csrf"},
		{"form without a login", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.do(http.MethodPost, ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada", "csrf_token": "x"}), "")
		}, 401, "unauthenticated"},
		{"form with a header from an address that is no proxy", proxied, func(f *fixture) *httptest.ResponseRecorder {
			return f.proxied(ackweb.PagePath, formType, formBody(map[string]string{"action": "acknowledge", "address": alice, "by": "Ada"}), "mallory", "10.0.0.2:40000")
		}, 403, "untrusted_proxy"},
		{"over-long comment", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"`+alice+`","by":"Ada","comment":"`+strings.Repeat("x", 257)+`"}`, "oncall")
		}, 400, "invalid"},
		{"over-long by", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"`+alice+`","by":"`+strings.Repeat("x", 65)+`"}`, "oncall")
		}, 400, "invalid"},
		{"body over the limit", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"`+alice+`","by":"Ada","comment":"`+strings.Repeat("x", ackweb.MaxBodyBytes)+`"}`, "oncall")
		}, 413, "too_large"},
		{"unknown member", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"`+alice+`","by":"Ada","handled_at":"2030-01-01T00:00:00Z"}`, "oncall")
		}, 400, "invalid"},
		{"unknown feed", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"`+alice+`","source":"nonsense","by":"Ada"}`, "oncall")
		}, 400, "invalid"},
		{"address not watched", basic(), func(f *fixture) *httptest.ResponseRecorder {
			return f.postJSON(`{"address":"bob@example.com","by":"Ada"}`, "oncall")
		}, 404, "unknown_address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "", c.o)
			rec := c.req(f)
			if rec.Code != c.status {
				t.Errorf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if got := f.refused(c.reason); got != 1 {
				t.Errorf("refused{reason=%q} = %v, want 1", c.reason, got)
			}
			if got := f.list(); len(got) != 0 || f.changes("acknowledge") != 0 {
				t.Errorf("a refused write changed something: listed %v", got)
			}
		})
	}
}

func mustProxies(t *testing.T, v string) []netip.Prefix {
	t.Helper()
	p, err := ackweb.ParseProxies(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A proxy's header names the user, who fills by.
func TestTrustedProxyHeader(t *testing.T) {
	f := newFixture(t, "", ackweb.Options{Write: true, Auth: ackweb.Auth{UserHeader: "X-Forwarded-User", Proxies: mustProxies(t, "127.0.0.0/8")}})
	rec := f.proxied(ackweb.APIPath, "application/json", `{"address":"`+alice+`","source":"combolist"}`, "ada", "127.0.0.1:40000")
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"by":"ada"`) {
		t.Errorf("POST through the proxy = %d %s, want 201 by ada", rec.Code, rec.Body)
	}
}

// Writes beyond the burst are refused with 429 and counted, before
// anything is read or written.
func TestWriteRateLimit(t *testing.T) {
	o := basic()
	o.WriteRate, o.WriteBurst = 1e-6, 3
	f := newFixture(t, "", o)
	codes := map[int]int{}
	for range 10 {
		codes[f.postJSON(`{"address":"`+alice+`","source":"combolist","by":"Ada"}`, "oncall").Code]++
	}
	if codes[http.StatusCreated] != 3 || codes[http.StatusTooManyRequests] != 7 || f.refused("rate_limit") != 7 {
		t.Errorf("answers %v, rate_limit refusals %v; want 3 × 201 and 7 × 429", codes, f.refused("rate_limit"))
	}
}

// Hostile by and comment values are escaped on every page; the pages
// carry a Content-Security-Policy that allows no script at all.
func TestHostileValuesEscaped(t *testing.T) {
	f := newFixture(t, "", basic())
	const script, attr = `<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`
	body, _ := json.Marshal(map[string]string{"address": alice, "source": "combolist", "by": attr, "comment": script})
	if rec := f.postJSON(string(body), "oncall"); rec.Code != http.StatusCreated {
		t.Fatalf("POST = %d: %s", rec.Code, rec.Body)
	}
	if api := f.do(http.MethodGet, ackweb.APIPath, "", "", "").Body.String(); strings.Contains(api, "<script>") || strings.Contains(api, "<img") {
		t.Errorf("the API's JSON carries the hostile values unescaped:\n%s", api)
	}
	for _, target := range []string{ackweb.ListPath, ackweb.PagePath + "?address=" + url.QueryEscape(alice)} {
		rec := f.do(http.MethodGet, target, "", "", "oncall")
		page := rec.Body.String()
		if strings.Contains(page, script) || strings.Contains(page, "<img") || !strings.Contains(page, "&lt;script&gt;") {
			t.Errorf("%s does not escape the hostile values:\n%s", target, page)
		}
		csp := rec.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", target, csp)
		}
	}
}
