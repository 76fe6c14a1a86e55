package testkit

import (
	"net"
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
