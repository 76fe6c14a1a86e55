package testkit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
)

// SignedRequest is a webhook delivery as the service sends it: a POST of
// body to url with a JSON content type and signature (see Signature) in
// X-Service-Signature.
func SignedRequest(t testing.TB, url string, body []byte, signature string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Service-Signature", signature)
	return req
}

// Signature is the X-Service-Signature of body under secret.
func Signature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
