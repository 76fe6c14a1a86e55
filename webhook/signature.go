// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/breach-exporter/breach_exporter/internal/config"
)

// SignatureHeader carries `sha256=<lowercase hex HMAC-SHA256 of the raw body>`.
const SignatureHeader = "X-Service-Signature"

const signaturePrefix = "sha256="

// signedBy returns the account whose secret signs body, nil when none does
// or the request does not carry exactly one signature header in the spec's
// exact shape. Uppercase hex is refused: the spec prescribes lowercase, and
// accepting only one spelling keeps the check free of interpretation. Each
// comparison is constant-time; the first match ends the search, which tells
// a sender only which account's secret it holds (the load refuses one
// secret in two accounts).
func signedBy(header http.Header, body []byte, accounts []*config.AccountBundle) *config.AccountBundle {
	values := header.Values(SignatureHeader)
	if len(values) != 1 {
		return nil
	}
	digest, ok := parseSignature(values[0])
	if !ok {
		return nil
	}
	sum := make([]byte, 0, sha256.Size)
	for _, a := range accounts {
		for _, secret := range a.Secrets {
			mac := hmac.New(sha256.New, secret)
			mac.Write(body)
			if hmac.Equal(mac.Sum(sum[:0]), digest) {
				return a
			}
		}
	}
	return nil
}

func parseSignature(value string) ([]byte, bool) {
	hexDigest, ok := strings.CutPrefix(value, signaturePrefix)
	if !ok || len(hexDigest) != 2*sha256.Size {
		return nil, false
	}
	for i := 0; i < len(hexDigest); i++ {
		c := hexDigest[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return nil, false
		}
	}
	digest, err := hex.DecodeString(hexDigest)
	return digest, err == nil
}
