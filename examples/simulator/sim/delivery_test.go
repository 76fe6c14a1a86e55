// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

var testSecret = []byte("whsec-test-secret")

type received struct {
	body        []byte
	signature   string
	contentType string
}

// receiver is a webhook endpoint that answers the first failures requests
// with 500 and the rest with 204, and verifies nothing itself: the tests
// check the signatures with their own HMAC code.
type receiver struct {
	srv *httptest.Server
	got chan received

	mu       sync.Mutex
	failures int
}

func newReceiver(t *testing.T, failures int) *receiver {
	r := &receiver{got: make(chan received, 100), failures: failures}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		fail := r.failures > 0
		r.failures--
		r.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
		r.got <- received{body: body, signature: req.Header.Get("X-Service-Signature"), contentType: req.Header.Get("Content-Type")}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) next(t *testing.T) received {
	t.Helper()
	select {
	case got := <-r.got:
		return got
	case <-time.After(5 * time.Second):
		t.Fatal("no webhook delivery within 5s")
		return received{}
	}
}

// validSignature is the receiver's rule of spec section 6, written
// independently of the simulator's signing code.
func validSignature(secret, body []byte, header string) bool {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(header))
}

func newDeliveringSim(t *testing.T, r *receiver, plan string) (*sim.Simulator, *clockwork.FakeClock) {
	return newSim(t, func(o *sim.Options) {
		o.Plan = plan
		o.WebhookURL = r.srv.URL
		o.WebhookSecret = testSecret
		o.HTTPClient = r.srv.Client() // its connections close with the server
	})
}

// sweepUntilAlerts sweeps every 30s of fake time until a sweep produces
// alerts; the seed makes this quick and repeatable.
func sweepUntilAlerts(t *testing.T, s *sim.Simulator, clock *clockwork.FakeClock) []sim.Alert {
	t.Helper()
	for range 20 {
		clock.Advance(30 * time.Second)
		if alerts := s.Sweep(t.Context()); len(alerts) > 0 {
			return alerts
		}
	}
	t.Fatal("20 sweeps without an alert")
	return nil
}

func TestDeliveriesAreSignedAndMatchTheAlerts(t *testing.T) {
	r := newReceiver(t, 0)
	s, clock := newDeliveringSim(t, r, "pro")
	alerts := sweepUntilAlerts(t, s, clock)
	s.Flush(t.Context())

	for i, want := range alerts {
		got := r.next(t)
		if got.contentType != "application/json" {
			t.Errorf("alert %d: Content-Type %q", i, got.contentType)
		}
		if !validSignature(testSecret, got.body, got.signature) {
			t.Errorf("alert %d: signature %q does not verify", i, got.signature)
		}
		if validSignature([]byte("another secret"), got.body, got.signature) {
			t.Errorf("alert %d: signature verifies with the wrong secret", i)
		}
		var alert sim.Alert
		if err := json.Unmarshal(got.body, &alert); err != nil {
			t.Fatalf("alert %d: %v", i, err)
		}
		if !reflect.DeepEqual(alert, want) {
			t.Errorf("alert %d: delivered %+v, Sweep returned %+v", i, alert, want)
		}
	}
	st := s.Stats()
	if st.Deliveries != (sim.DeliveryStats{Attempted: len(alerts), Succeeded: len(alerts)}) {
		t.Errorf("deliveries %+v, want %d attempted and succeeded", st.Deliveries, len(alerts))
	}
	if !reflect.DeepEqual(st.Alerts, st.AlertsProduced) {
		t.Errorf("accepted %v, produced %v", st.Alerts, st.AlertsProduced)
	}
}

func TestFailedDeliveryIsRetriedWithTheSameBody(t *testing.T) {
	r := newReceiver(t, 2)
	s, clock := newDeliveringSim(t, r, "business")
	alerts := sweepUntilAlerts(t, s, clock)

	first := r.next(t) // answered 500
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(backoff)
		retry := r.next(t)
		if !bytes.Equal(retry.body, first.body) || retry.signature != first.signature {
			t.Fatalf("retry %d differs:\n%s\n%s", i+1, first.body, retry.body)
		}
	}
	for range alerts[1:] {
		r.next(t)
	}
	s.Flush(t.Context())

	if !validSignature(testSecret, first.body, first.signature) {
		t.Error("signature does not verify")
	}
	want := sim.DeliveryStats{Attempted: len(alerts) + 2, Succeeded: len(alerts), Failed: 2}
	if got := s.Stats().Deliveries; got != want {
		t.Errorf("deliveries %+v, want %+v", got, want)
	}
}

func TestDeliveryIsGivenUpAfterFourAttempts(t *testing.T) {
	r := newReceiver(t, 1000)
	s, clock := newDeliveringSim(t, r, "pro")
	alerts := sweepUntilAlerts(t, s, clock)

	for range alerts {
		r.next(t)
		for _, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			clock.Advance(backoff)
			r.next(t)
		}
	}
	s.Flush(t.Context())

	st := s.Stats()
	want := sim.DeliveryStats{Attempted: 4 * len(alerts), Failed: 4 * len(alerts), GivenUp: len(alerts)}
	if st.Deliveries != want {
		t.Errorf("deliveries %+v, want %+v", st.Deliveries, want)
	}
	if len(st.Alerts) != 0 {
		t.Errorf("accepted alerts %v, want none", st.Alerts)
	}
}

func TestCancelledContextAbandonsRetries(t *testing.T) {
	r := newReceiver(t, 1000)
	s, clock := newDeliveringSim(t, r, "pro")
	ctx, cancel := context.WithCancel(t.Context())
	var alerts []sim.Alert
	for len(alerts) == 0 {
		clock.Advance(30 * time.Second)
		alerts = s.Sweep(ctx)
	}
	r.next(t)
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	s.Flush(t.Context())
	if got := s.Stats().Deliveries; got.GivenUp != len(alerts) || got.Attempted != 1 {
		t.Errorf("deliveries %+v, want 1 attempt and %d given up", got, len(alerts))
	}
}

func TestNoDeliveriesWithoutWebhookPlan(t *testing.T) {
	for _, plan := range []string{"free", "personal"} {
		r := newReceiver(t, 0)
		s, clock := newDeliveringSim(t, r, plan)
		alerts := sweepUntilAlerts(t, s, clock)
		s.Flush(t.Context())
		if st := s.Stats(); st.Deliveries != (sim.DeliveryStats{}) || len(st.Alerts) != 0 {
			t.Errorf("%s: deliveries %+v, accepted %v", plan, st.Deliveries, st.Alerts)
		}
		if len(s.Stats().AlertsProduced) == 0 {
			t.Errorf("%s: %d alerts produced but not counted", plan, len(alerts))
		}
		select {
		case got := <-r.got:
			t.Errorf("%s: receiver got %s", plan, got.body)
		default:
		}
	}
}

// Each account's alerts go to the one webhook URL signed with that
// account's own secret (a second account without a secret of its own uses
// the first one's); an account whose plan has no webhooks gets none.
func TestEachAccountSignsItsAlertsWithItsOwnSecret(t *testing.T) {
	r := newReceiver(t, 0)
	labsSecret := []byte("whsec-labs")
	owner := map[string][]byte{} // address -> the secret its alerts must verify with
	for _, a := range sim.DefaultAddresses() {
		owner[a.Email] = testSecret
	}
	labs := []sim.Address{{Email: "zoe@labs.example", Verified: true}, {Email: "yan@labs.example", Verified: true}}
	shared := []sim.Address{{Email: "xia@shared.example", Verified: true}}
	free := []sim.Address{{Email: "wes@free.example", Verified: true}}
	for _, a := range labs {
		owner[a.Email] = labsSecret
	}
	owner[shared[0].Email] = testSecret
	s, clock := newSim(t, func(o *sim.Options) {
		o.WebhookURL, o.WebhookSecret, o.HTTPClient = r.srv.URL, testSecret, r.srv.Client()
		o.MoreAccounts = []sim.Account{
			{Token: secondToken, Plan: "business", Addresses: labs, WebhookSecret: labsSecret},
			{Token: secondToken + "_shared", Plan: "pro", Addresses: shared},
			{Token: secondToken + "_free", Plan: "free", Addresses: free, WebhookSecret: []byte("whsec-free")},
		}
	})
	delivered := map[string]int{}
	produced := map[string]int{}
	for i := 0; i < 40 && (delivered[labs[0].Email]+delivered[labs[1].Email] == 0 || produced[free[0].Email] == 0); i++ {
		clock.Advance(30 * time.Second)
		alerts := s.Sweep(t.Context())
		s.Flush(t.Context())
		for _, a := range alerts {
			produced[a.Address]++
			if a.Address == free[0].Email {
				continue
			}
			got := r.next(t)
			var alert sim.Alert
			if err := json.Unmarshal(got.body, &alert); err != nil {
				t.Fatal(err)
			}
			secret, ok := owner[alert.Address]
			if !ok {
				t.Fatalf("alert for %s, an address of no delivering account", alert.Address)
			}
			if !validSignature(secret, got.body, got.signature) {
				t.Errorf("alert for %s: signature does not verify with its account's secret", alert.Address)
			}
			delivered[alert.Address]++
		}
	}
	if delivered[labs[0].Email]+delivered[labs[1].Email] == 0 || produced[free[0].Email] == 0 {
		t.Fatalf("40 sweeps without an alert of both the second and the free account: produced %v", produced)
	}
	select {
	case got := <-r.got:
		t.Errorf("a delivery no sweep accounts for (the free plan's?): %s", got.body)
	default:
	}
	if st := s.Stats(); st.Deliveries.Attempted != sum(delivered) {
		t.Errorf("deliveries attempted %d, want %d", st.Deliveries.Attempted, sum(delivered))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
