// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// FreeAddress returns a loopback address that was free a moment ago, for
// code that opens its own listener.
func FreeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Get is the status and body of a GET of url; status 0 and the error's
// text when the request fails (a server not listening yet, for pollers).
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}
