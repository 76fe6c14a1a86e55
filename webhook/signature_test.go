// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/config"
)

// The reused HMAC states give each account's secrets, and only them, in
// the bundle in force, from many requests at once.
func TestSignedByReusedStates(t *testing.T) {
	secrets := [][]byte{[]byte("s0"), []byte(strings.Repeat("long secret ", 20)), {}, []byte("s3")}
	before := &config.Bundle{Accounts: []*config.AccountBundle{
		{Name: "a", Secrets: secrets[:2]},
		{Name: "b", Secrets: secrets[2:3]},
	}}
	after := &config.Bundle{Accounts: []*config.AccountBundle{{Name: "b", Secrets: secrets[3:]}}}
	var m macs
	check := func(b *config.Bundle, body []byte, secret []byte, want string) error {
		got := m.signedBy(http.Header{SignatureHeader: {sim.Sign(secret, body)}}, body, b)
		if got != nil {
			if got.Name != want {
				return fmt.Errorf("%q signed with %q: account %s, want %s", body, secret, got.Name, want)
			}
		} else if want != "<none>" {
			return fmt.Errorf("%q signed with %q: no account, want %s", body, secret, want)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				body := fmt.Appendf(nil, `{"n":%d,"g":%d}`, i, g)
				for _, c := range []struct {
					b      *config.Bundle
					secret []byte
					want   string
				}{
					{before, secrets[0], "a"}, {before, secrets[1], "a"}, {before, secrets[2], "b"},
					{before, secrets[3], "<none>"}, {after, secrets[3], "b"}, {after, secrets[0], "<none>"},
				} {
					if err := check(c.b, body, c.secret, c.want); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	body := []byte(`{}`)
	for _, header := range []http.Header{
		{},
		{SignatureHeader: {sim.Sign(secrets[0], body), sim.Sign(secrets[0], body)}},
		{SignatureHeader: {strings.ToUpper(sim.Sign(secrets[0], body))}},
		{SignatureHeader: {strings.TrimPrefix(sim.Sign(secrets[0], body), "sha256=")}},
		{SignatureHeader: {sim.Sign(secrets[0], body) + "0"}},
	} {
		if got := m.signedBy(header, body, before); got != nil {
			t.Errorf("%v: signed by %s", header, got.Name)
		}
	}
}
