// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

const labelsYAML = `api:
  base_url: https://breaches.example.com/api/v1
addresses:
  - Alice@Example.com
  - {email: ops@example.com, alias: ops}
  - {email: sec@example.com, alias: security}
`

func TestWatched(t *testing.T) {
	c := mustParse(t, labelsYAML)
	want := []breach.Address{
		{Email: "Alice@Example.com", Account: breach.DefaultAccount},
		{Email: "ops@example.com", Alias: "ops", Account: breach.DefaultAccount},
		{Email: "sec@example.com", Alias: "security", Account: breach.DefaultAccount},
	}
	if got := c.Watched(); !reflect.DeepEqual(got, want) {
		t.Errorf("Watched() = %+v, want %+v", got, want)
	}
}
