// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	_ "embed"
	"net/http"
)

// The description served at /openapi.json, hand-written to the spec; the
// tests check that the simulator's own responses validate against it.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI 3.1 description.
func OpenAPIDocument() []byte {
	return bytes.Clone(openAPIDocument)
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
