package sim_test

import (
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

func TestParseAddresses(t *testing.T) {
	addrs, err := sim.ParseAddresses([]byte("- email: a@example.com\n  verified: true\n- email: b@example.org\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.Address{{Email: "a@example.com", Verified: true}, {Email: "b@example.org"}}
	if len(addrs) != 2 || addrs[0] != want[0] || addrs[1] != want[1] {
		t.Errorf("got %+v, want %+v", addrs, want)
	}

	for name, c := range map[string]struct{ yaml, wantErr string }{
		"typo in a key": {"- email: a@example.com\n  verfied: true\n", "verfied"},
		"duplicate":     {"- email: a@example.com\n- email: A@example.com\n", "listed twice"},
		"not an email":  {"- email: not-an-address\n", "not a plain email"},
		"display name":  {"- email: Alice <a@example.com>\n", "not a plain email"},
		"empty":         {"[]\n", "no addresses"},
		"empty file":    {"", "no addresses"},
		"not a list":    {"email: a@example.com\n", "parsing addresses"},
	} {
		if _, err := sim.ParseAddresses([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.wantErr)
		}
	}
}

func TestDefaultAddressesHaveExactlyOneUnverified(t *testing.T) {
	unverified := 0
	for _, a := range sim.DefaultAddresses() {
		if !a.Verified {
			unverified++
		}
		if !strings.HasSuffix(a.Email, "@example.com") && !strings.HasSuffix(a.Email, "@example.org") {
			t.Errorf("%s is not on a reserved example domain", a.Email)
		}
	}
	if n := len(sim.DefaultAddresses()); n < 6 || unverified != 1 {
		t.Errorf("%d addresses, %d unverified", n, unverified)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	valid := sim.Options{Token: testToken, Plan: "pro"}
	for name, c := range map[string]struct {
		mutate  func(*sim.Options)
		wantErr string
	}{
		"token without prefix":   {func(o *sim.Options) { o.Token = "abc" }, "svc_ak_"},
		"bare prefix":            {func(o *sim.Options) { o.Token = "svc_ak_" }, "svc_ak_"},
		"unknown plan":           {func(o *sim.Options) { o.Plan = "gold" }, "plan"},
		"negative rate limit":    {func(o *sim.Options) { o.RateLimit = -1 }, "negative"},
		"same token twice":       {func(o *sim.Options) { o.MoreAccounts = []sim.Account{{Token: testToken, Plan: "pro"}} }, "another account's"},
		"second account's plan":  {func(o *sim.Options) { o.MoreAccounts = []sim.Account{{Token: "svc_ak_two", Plan: "gold"}} }, "account 2: plan"},
		"relative webhook URL":   {func(o *sim.Options) { o.WebhookURL = "/hook"; o.WebhookSecret = testSecret }, "absolute"},
		"webhook without secret": {func(o *sim.Options) { o.WebhookURL = "http://127.0.0.1:1/hook" }, "secret"},
	} {
		o := valid
		c.mutate(&o)
		if _, err := sim.New(o); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.wantErr)
		}
	}
	if _, err := sim.New(valid); err != nil {
		t.Errorf("valid options: %v", err)
	}
	empty := valid
	empty.Addresses = []sim.Address{} // a test sets the answers itself
	if _, err := sim.New(empty); err != nil {
		t.Errorf("an account without addresses: %v", err)
	}
}
