// SPDX-License-Identifier: Apache-2.0

package openapitest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	// routers/gorillamux would need gorilla/mux in go.mod; the legacy
	// router needs nothing beyond kin-openapi.
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The simulator's own test helpers are in sim's _test files, which another
// module cannot import; this test needs only a simulator and a recorder.

const testToken = "svc_ak_openapi_test_token"

// newSim is a seeded simulator on a fake clock; rateLimit 0 is the default.
func newSim(t *testing.T, rateLimit int) (*sim.Simulator, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC))
	s, err := sim.New(sim.Options{Token: testToken, Plan: "pro", Seed: 42, Clock: clock, RateLimit: rateLimit})
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	return s, clock
}

func loadDocument(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(sim.OpenAPIDocument())
	if err != nil {
		t.Fatalf("loading: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("validating: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentValidates(t *testing.T) {
	doc := loadDocument(t)
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "2.0.0" {
		t.Errorf("openapi %q, info.version %q", doc.OpenAPI, doc.Info.Version)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/api/v1" {
		t.Errorf("servers %+v", doc.Servers)
	}
	bearer := doc.Components.SecuritySchemes["bearerAuth"]
	if bearer == nil || bearer.Value.Type != "http" || bearer.Value.Scheme != "bearer" {
		t.Errorf("bearer scheme %+v", bearer)
	}
	for path, statuses := range map[string][]int{
		"/me":       {200, 401, 429},
		"/breaches": {200, 400, 401, 403, 404, 429},
	} {
		op := doc.Paths.Value(path).Get
		if op == nil {
			t.Fatalf("GET %s missing", path)
		}
		if got := op.Responses.Len(); got != len(statuses) {
			t.Errorf("GET %s: %d responses, want %d", path, got, len(statuses))
		}
		for _, status := range statuses {
			resp := op.Responses.Status(status)
			if resp == nil {
				t.Errorf("GET %s: no %d response", path, status)
				continue
			}
			for _, h := range []string{sim.HeaderLimit, sim.HeaderRemaining, sim.HeaderReset} {
				if hdr := resp.Value.Headers[h]; hdr == nil || !hdr.Value.Required {
					t.Errorf("GET %s %d: header %s missing or optional", path, status, h)
				}
			}
		}
	}
	for name, want := range map[string][]string{
		"Plan":   sim.Plans(),
		"Source": breach.KnownSources,
		"Field":  sim.Fields(),
	} {
		var got []string
		for _, v := range doc.Components.Schemas[name].Value.Enum {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, want) {
			t.Errorf("enum %s = %v, want %v", name, got, want)
		}
	}
}

// exchange is one recorded request and response.
type exchange struct {
	req *http.Request
	rec *httptest.ResponseRecorder
}

// record serves a GET of target, with token as its bearer token when not
// empty.
func record(h http.Handler, target, token string) exchange {
	x := exchange{req: httptest.NewRequest(http.MethodGet, target, nil), rec: httptest.NewRecorder()}
	if token != "" {
		x.req.Header.Set("Authorization", "Bearer "+token)
	}
	h.ServeHTTP(x.rec, x.req)
	return x
}

func validateExchange(t *testing.T, router routers.Router, x exchange, body []byte) error {
	t.Helper()
	route, params, err := router.FindRoute(x.req)
	if err != nil {
		t.Fatalf("%s: no route: %v", x.req.URL, err)
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: x.req, PathParams: params, Route: route},
		Status:                 x.rec.Code,
		Header:                 x.rec.Header(),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(t.Context(), input)
}

func TestResponsesValidateAgainstTheDocument(t *testing.T) {
	router, err := legacy.NewRouter(loadDocument(t))
	if err != nil {
		t.Fatal(err)
	}
	s, clock := newSim(t, 11)
	// A few sweeps so that every kind of finding is in some response.
	for range 5 {
		clock.Advance(30 * time.Second)
		s.Sweep(t.Context())
	}
	h := s.Handler()
	var exchanges []exchange
	for _, a := range sim.DefaultAddresses() {
		exchanges = append(exchanges, record(h, "/api/v1/breaches?email="+a.Email, testToken))
	}
	exchanges = append(exchanges,
		record(h, "/api/v1/me", testToken),
		record(h, "/api/v1/breaches", testToken),
		record(h, "/api/v1/breaches?email=stranger@example.net", testToken),
		record(h, "/api/v1/me", ""),
		record(h, "/api/v1/breaches?email=alice@example.com", "svc_ak_wrong"),
		record(h, "/api/v1/me", testToken), // the 12th: over the limit of 11
		record(h, "/api/v1/breaches?email=alice@example.com", testToken),
	)

	seen := map[int]bool{}
	for _, x := range exchanges {
		seen[x.rec.Code] = true
		if err := validateExchange(t, router, x, x.rec.Body.Bytes()); err != nil {
			t.Errorf("%s %d: %v\nbody: %s", x.req.URL, x.rec.Code, err, x.rec.Body)
		}
	}
	for _, status := range []int{200, 400, 401, 403, 404, 429} {
		if !seen[status] {
			t.Errorf("no %d response was recorded", status)
		}
	}
}

// TestValidatorRejectsOffSpecResponses makes sure the validation above can
// fail: the same exchange with spec violations must not pass.
func TestValidatorRejectsOffSpecResponses(t *testing.T) {
	router, err := legacy.NewRouter(loadDocument(t))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newSim(t, 0)
	h := s.Handler()

	x := record(h, "/api/v1/breaches?email=alice@example.com", testToken)
	// A timestamp without milliseconds.
	noMillis := regexp.MustCompile(`\.\d{3}Z`).ReplaceAllString(x.rec.Body.String(), "Z")
	if err := validateExchange(t, router, x, []byte(noMillis)); err == nil {
		t.Errorf("a timestamp without milliseconds validated: %s", noMillis)
	}
	// A feed outside the enum.
	badSource := strings.Replace(x.rec.Body.String(), `"source":"`, `"source":"x`, 1)
	if err := validateExchange(t, router, x, []byte(badSource)); err == nil {
		t.Error("an unknown source validated")
	}
	// A missing rate-limit header.
	x = record(h, "/api/v1/me", testToken)
	x.rec.Header().Del(sim.HeaderReset)
	if err := validateExchange(t, router, x, x.rec.Body.Bytes()); err == nil {
		t.Error("a response without X-RateLimit-Reset validated")
	}
}

func TestAlertsValidateAgainstTheWebhookSchema(t *testing.T) {
	doc := loadDocument(t)
	schema := doc.Components.Schemas["Alert"].Value
	webhook := doc.Webhooks["alert.created"]
	if webhook == nil || webhook.Post == nil {
		t.Fatal("webhooks.alert.created.post missing")
	}
	s, clock := newSim(t, 0)
	n := 0
	for range 10 {
		clock.Advance(30 * time.Second)
		for _, a := range s.Sweep(t.Context()) {
			n++
			data, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			var value any
			if err := json.Unmarshal(data, &value); err != nil {
				t.Fatal(err)
			}
			if err := schema.VisitJSON(value, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("alert %s: %v", data, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts to validate")
	}
	bad := map[string]any{"event": "alert.created", "severity": "urgent"}
	if err := schema.VisitJSON(bad, openapi3.EnableJSONSchema2020()); err == nil {
		t.Error("an off-spec alert validated")
	}
}
