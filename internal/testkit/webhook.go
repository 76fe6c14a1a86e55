// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// SignedRequest is a webhook delivery as the service sends it: a POST of
// body to url with a JSON content type and signature (see sim.Sign) in
// X-Service-Signature (sim.Sign makes it).
func SignedRequest(t testing.TB, url string, body []byte, signature string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sim.SignatureHeader, signature)
	return req
}
