// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/breach-exporter/breach_exporter/internal/strictjson"
)

// listAnswer is GET /api/v1/acknowledgements.
type listAnswer struct {
	Acknowledgements []Row `json:"acknowledgements"`
	// NotListed counts those in force past MaxListed.
	NotListed int `json:"not_listed"`
}

// apiRequest is the body of POST /api/v1/acknowledgements.
type apiRequest struct {
	Address string `json:"address"`
	Source  string `json:"source"`
	By      string `json:"by"`
	Comment string `json:"comment"`
}

func (h *Handler) apiList(w http.ResponseWriter, _ *http.Request) {
	rows, more := h.listed()
	if rows == nil {
		rows = []Row{}
	}
	writeJSON(w, http.StatusOK, listAnswer{Acknowledgements: rows, NotListed: more})
}

func (h *Handler) apiAcknowledge(w http.ResponseWriter, r *http.Request) {
	wr, ref := h.guard(r, checkJSON)
	if ref != nil {
		apiError(w, ref)
		return
	}
	var q apiRequest
	if ref := h.readJSON(r, &q); ref != nil {
		apiError(w, ref)
		return
	}
	row, ref := h.acknowledge(wr, request(q))
	if ref != nil {
		apiError(w, ref)
		return
	}
	writeJSON(w, http.StatusCreated, row)
}

// apiWithdraw is DELETE /api/v1/acknowledgements?address=…&source=…: the
// page's acknowledgement of that address label and feed (source empty or
// absent: the one for every feed).
func (h *Handler) apiWithdraw(w http.ResponseWriter, r *http.Request) {
	wr, ref := h.guard(r, checkJSON)
	if ref != nil {
		apiError(w, ref)
		return
	}
	q := r.URL.Query()
	if ref := h.withdraw(wr, request{Address: q.Get("address"), Source: q.Get("source")}); ref != nil {
		apiError(w, ref)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readJSON reads the body into v: one object of exactly the known
// members, within MaxBodyBytes.
func (h *Handler) readJSON(r *http.Request, v *apiRequest) *refusal {
	data, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return h.count(refuse(http.StatusRequestEntityTooLarge, "too_large", "the request is too large"))
	}
	if err == nil {
		err = strictjson.Check(data, "address", "source", "by", "comment")
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		return h.count(refuse(http.StatusBadRequest, "invalid", "the body must be one JSON object with address, source, by and comment"))
	}
	return nil
}

func apiError(w http.ResponseWriter, r *refusal) {
	if r.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, r.status, map[string]string{"error": r.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", jsonContentType+"; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
