// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Watched returns the configured addresses of every account, each with its
// account, in file order.
func (c *Config) Watched() []breach.Address {
	var out []breach.Address
	for _, acct := range c.AccountsInForce() {
		for _, a := range acct.Addresses {
			out = append(out, breach.Address{Email: a.Email, Alias: a.Alias, Account: acct.Name, Labels: breach.OwnerLabels(a.Labels)})
		}
	}
	return out
}

// addressPaths are the field paths of Watched's addresses, for problems.
func (c *Config) addressPaths() []string {
	var out []string
	for i, acct := range c.AccountsInForce() {
		for j := range acct.Addresses {
			out = append(out, fmt.Sprintf("%saddresses[%d]", c.accountPath(i), j))
		}
	}
	return out
}
