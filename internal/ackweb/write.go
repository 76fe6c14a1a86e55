// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/go-kit/log/level"
	"golang.org/x/net/xsrftoken"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// refusal is a write refused: its status, its reason (the refused
// counter's label) and what the client is told. The message never holds
// a value from the request.
type refusal struct {
	status int
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func refuse(status int, reason, msg string) *refusal {
	return &refusal{status: status, reason: reason, msg: msg}
}

// writer is who writes, once the guard let the request through.
type writer struct {
	user, how, remote string
}

// guard decides whether r may write: writes on, the request not
// cross-site, an authenticated user, within the rate limit, and the
// request's own CSRF defence (check: the form's token, the API's JSON
// content type). A refusal is counted.
func (h *Handler) guard(r *http.Request, check func(*http.Request, string) *refusal) (writer, *refusal) {
	ref := h.admit(r, check)
	if ref != nil {
		h.refused.WithLabelValues(ref.reason).Inc()
		return writer{}, ref
	}
	user, how, _ := h.auth().user(r)
	return writer{user: user, how: how, remote: r.RemoteAddr}, nil
}

func (h *Handler) admit(r *http.Request, check func(*http.Request, string) *refusal) *refusal {
	if !h.o.Write {
		return refuse(http.StatusForbidden, "disabled", "writing acknowledgements is off: start the exporter with --web.enable-acknowledgements")
	}
	// A browser says where a request comes from; no page of another site
	// may write here, whatever the browser sends along.
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return refuse(http.StatusForbidden, "cross_site", "a request from another site cannot write acknowledgements")
	}
	user, _, err := h.auth().user(r)
	switch {
	case errors.Is(err, errUntrustedProxy):
		return refuse(http.StatusForbidden, "untrusted_proxy", err.Error())
	case err != nil:
		return refuse(http.StatusUnauthorized, "unauthenticated", err.Error())
	}
	// After the user is known, so that strangers cannot use up the
	// writes of those who may write; before the body is read.
	if !h.limiter.Allow() {
		return refuse(http.StatusTooManyRequests, "rate_limit", "too many writes; try again in a few seconds")
	}
	return check(r, user)
}

// checkForm is the form's CSRF defence: the token of the page, bound to
// the user, in the form and in the SameSite cookie alike.
func (h *Handler) checkForm(r *http.Request, user string) *refusal {
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return refuse(http.StatusRequestEntityTooLarge, "too_large", "the request is too large")
		}
		return refuse(http.StatusBadRequest, "invalid", "the form cannot be read")
	}
	token := r.PostForm.Get(csrfField)
	c, err := r.Cookie(csrfCookie)
	if token == "" || err != nil || c.Value != token || !xsrftoken.Valid(token, h.key, user, csrfAction) {
		return refuse(http.StatusForbidden, "csrf", "the form's token is missing, wrong or expired: open the page again and resubmit")
	}
	return nil
}

// checkJSON is the API's CSRF defence: a page of another site cannot send
// a JSON content type without the browser asking first (CORS), and this
// handler answers no such question.
func checkJSON(r *http.Request, _ string) *refusal {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method == http.MethodPost && (err != nil || mt != jsonContentType) {
		return refuse(http.StatusUnsupportedMediaType, "csrf", "the body must be application/json")
	}
	return nil
}

// request is a write's subject, as the client names it.
type request struct {
	Address, Source, By, Comment string
}

// acknowledge records wr's acknowledgement of q and returns its row.
func (h *Handler) acknowledge(wr writer, q request) (Row, *refusal) {
	e, ok := h.find(q.Address)
	if !ok {
		return Row{}, h.count(refuse(http.StatusNotFound, "unknown_address", "no watched address has that label"))
	}
	if q.By == "" {
		q.By = wr.user
	}
	entry := acknowledge.Entry{Address: e.Address.Email, Source: q.Source, HandledAt: h.o.Now(), By: q.By, Comment: q.Comment}
	if err := entry.Check(h.o.Now()); err != nil {
		return Row{}, h.count(refuse(http.StatusBadRequest, "invalid", err.Error()))
	}
	if err := h.o.Store.Acknowledge(e.Address.Email, q.Source, q.By, q.Comment); err != nil {
		if errors.Is(err, acknowledge.ErrPageFull) {
			return Row{}, h.count(refuse(http.StatusConflict, "failed", err.Error()))
		}
		return Row{}, h.count(refuse(http.StatusInternalServerError, "failed", "the acknowledgement could not be saved; see the exporter's log"))
	}
	h.audit(wr, "acknowledge", e.Label, q)
	// The row as it is now in force: the feed's, or for every feed the
	// address's row of that entry.
	if e, ok = h.find(e.Label); ok {
		for _, r := range acknowledgedRows(&e, h.o.Config.Load().Acknowledgements) {
			if r.Source == q.Source || r.Acknowledgement.Source == q.Source {
				return r, nil
			}
		}
	}
	return Row{Address: e.Label, Account: e.Address.AccountName(), Source: q.Source}, nil
}

// withdraw removes the page's acknowledgement of q.
func (h *Handler) withdraw(wr writer, q request) *refusal {
	e, ok := h.find(q.Address)
	if !ok {
		return h.count(refuse(http.StatusNotFound, "unknown_address", "no watched address has that label"))
	}
	done, err := h.o.Store.Withdraw(e.Address.Email, q.Source)
	switch {
	case err != nil:
		return h.count(refuse(http.StatusInternalServerError, "failed", "the change could not be saved; see the exporter's log"))
	case !done && h.inFile(e.Address.Key(), q.Source):
		return h.count(refuse(http.StatusConflict, "file_entry", "that acknowledgement is the file's: remove it from the acknowledgements file"))
	case !done:
		return h.count(refuse(http.StatusNotFound, "unknown_address", "the page holds no acknowledgement of that address and feed"))
	}
	h.audit(wr, "withdraw", e.Label, q)
	return nil
}

func (h *Handler) inFile(key, source string) bool {
	for _, a := range h.o.Config.Load().Acknowledgements.ForAddress(key) {
		if !a.Page && a.Source == source {
			return true
		}
	}
	return false
}

func (h *Handler) count(r *refusal) *refusal {
	h.refused.WithLabelValues(r.reason).Inc()
	return r
}

// audit logs a change: who (the authenticated user, how, from where),
// what (the address by its label, the feed, by and comment), and when (the
// line's time and handled_at), and counts it.
func (h *Handler) audit(wr writer, action, label string, q request) {
	h.changes.WithLabelValues(action).Inc()
	level.Info(h.o.Logger).Log("msg", "Acknowledgement changed on the page", "action", action,
		"address", label, "source", sourceOrAll(q.Source), "by", q.By, "comment", q.Comment,
		"user", wr.user, "auth", wr.how, "remote", wr.remote, "at", h.o.Now().UTC().Format(time.RFC3339))
}

func sourceOrAll(s string) string {
	if s == "" {
		return "(every feed)"
	}
	return breach.LabelValue(s, breach.MaxSourceBytes)
}
