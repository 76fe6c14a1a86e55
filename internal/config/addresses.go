package config

import "github.com/breach-exporter/breach_exporter/internal/breach"

// Watched returns the configured addresses, in config order.
func (c *Config) Watched() []breach.Address {
	out := make([]breach.Address, len(c.Addresses))
	for i, a := range c.Addresses {
		out[i] = breach.Address{Email: a.Email, Alias: a.Alias}
	}
	return out
}
