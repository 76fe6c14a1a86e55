// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
)

// WebhookAccountsOptions size the measurement of webhook intake with many
// accounts: an alert belongs to the account whose secret verifies it, so
// the receiver may compute one HMAC per account before it finds the one.
type WebhookAccountsOptions struct {
	Accounts  int // accounts of the many-accounts exporter (the goal's 20)
	Clients   int // concurrent senders, each on its own keep-alive connection
	Requests  int // timed requests per round and exporter
	Rounds    int // rounds, each timing both exporters back to back
	Addresses int // addresses of the account the alerts are for
}

// WebhookAccountsResult is accepted alerts per second through the exporter
// with many accounts, every alert signed by the last account's secret (the
// worst case), against the same exporter with that account alone.
type WebhookAccountsResult struct {
	Accounts int `json:"accounts"`
	Clients  int `json:"clients"`
	Requests int `json:"requests_per_round"`
	Rounds   int `json:"rounds"`
	// Accepted per second: the median round.
	ManyPerSecond float64   `json:"many_per_second"`
	OnePerSecond  float64   `json:"one_per_second"`
	ManyRounds    []float64 `json:"many_rounds_per_second"`
	OneRounds     []float64 `json:"one_rounds_per_second"`
	// Ratio is the median over rounds of many/one.
	Ratio float64 `json:"ratio"`
	// Accepted is what breach_webhook_requests_total{outcome="accepted"}
	// counted over every round, warm-up included; Sent is what was sent.
	Accepted int `json:"accepted"`
	Sent     int `json:"sent"`
}

// MeasureWebhookAccounts times the exporter's receiver (journal on, as in
// MeasureWebhook) with o.Accounts accounts and with one, in alternating
// rounds on loopback. Both run at 1 request a minute per account: the
// schedulers stay quiet and the rounds measure the intake.
func MeasureWebhookAccounts(o WebhookAccountsOptions) (WebhookAccountsResult, error) {
	if o.Accounts < 2 || o.Clients < 1 || o.Requests < 1 || o.Rounds < 1 || o.Addresses < 1 {
		return WebhookAccountsResult{}, errors.New("accounts must be at least 2, every other option at least 1")
	}
	res := WebhookAccountsResult{Accounts: o.Accounts, Clients: o.Clients, Requests: o.Requests, Rounds: o.Rounds}
	w, err := newWebhookRounds(o.Clients, o.Requests, o.Addresses)
	if err != nil {
		return res, err
	}
	defer w.stop()
	others := make([][]byte, o.Accounts-1)
	for i := range others {
		others[i] = []byte(randomHex(24))
	}

	err = eachRound(o.Rounds, 2, func(variant int) error {
		many := variant == 0
		setup := exporterSetup{baseURL: w.api.baseURL, emails: w.emails, requestsPerMinute: 1, webhook: true, persist: true}
		if many {
			setup.otherAccounts = others
		}
		target, err := startOurReceiver(setup, w.creds)
		if err != nil {
			return err
		}
		r, accepted, err := w.round(target)
		if err == nil {
			res.Accepted += accepted
			res.Sent += w.sent()
		}
		target.stop()
		if err != nil {
			return fmt.Errorf("%d accounts (many %t): %w", o.Accounts, many, err)
		}
		if many {
			res.ManyRounds = append(res.ManyRounds, r.rate)
		} else {
			res.OneRounds = append(res.OneRounds, r.rate)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.ManyPerSecond, res.OnePerSecond = medianFloat(res.ManyRounds), medianFloat(res.OneRounds)
	res.Ratio = medianRatio(res.ManyRounds, res.OneRounds)
	return res, nil
}
