package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// SignatureHeader carries `sha256=<lowercase hex HMAC-SHA256 of the raw body>`.
const SignatureHeader = "X-Service-Signature"

const signaturePrefix = "sha256="

// validSignature reports whether the request carries exactly one signature
// header, in the spec's exact shape, matching the body under any secret.
// Uppercase hex is refused: the spec prescribes lowercase, and accepting
// only one spelling keeps the check free of interpretation.
func validSignature(header http.Header, body []byte, secrets [][]byte) bool {
	values := header.Values(SignatureHeader)
	if len(values) != 1 {
		return false
	}
	digest, ok := parseSignature(values[0])
	if !ok {
		return false
	}
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, secret)
		mac.Write(body)
		if hmac.Equal(mac.Sum(nil), digest) {
			return true
		}
	}
	return false
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
