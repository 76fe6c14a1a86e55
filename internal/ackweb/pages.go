// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	"golang.org/x/net/xsrftoken"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
)

// style is the pages' one style sheet, inline: the Content-Security-Policy
// allows it by its hash and nothing else (no script at all). Colours keep
// a contrast of at least 7:1 (WCAG AAA) on white; focus is always visible.
const style = `body{font-family:system-ui,sans-serif;margin:0 auto;max-width:48rem;padding:1rem;color:#111;background:#fff;line-height:1.5}
a{color:#0645ad}a:focus,button:focus,input:focus,textarea:focus,select:focus{outline:3px solid #000;outline-offset:2px}
section{border:1px solid #555;border-radius:4px;padding:.5rem 1rem;margin:1rem 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0}dt{font-weight:bold}dd{margin:0;overflow-wrap:anywhere}
label{display:block;font-weight:bold;margin-top:.75rem}input,textarea,select{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #333}
button{font:inherit;margin-top:1rem;padding:.6rem 1.2rem;background:#003a70;color:#fff;border:0;border-radius:4px}
.note{background:#fff4ce;border-left:4px solid #5c4500;padding:.5rem 1rem}.open{color:#8a0000;font-weight:bold}.handled{color:#0b5d1e;font-weight:bold}`

// contentSecurityPolicy allows the inline style and forms posting here,
// nothing else.
var contentSecurityPolicy = func() string {
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}()

const layout = `{{define "head"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>{{.Title}} · breach_exporter</title><style>` + style + `</style></head>
<body><header><nav><a href="acknowledgements">Acknowledgements in force</a></nav></header><main><h1>{{.Title}}</h1>
{{if .Notice}}<p class="note" role="status">{{.Notice}}</p>{{end}}{{end}}
{{define "foot"}}</main></body></html>{{end}}
{{define "row"}}<dl>
<dt>Address</dt><dd>{{.Address}}</dd><dt>Account</dt><dd>{{.Account}}</dd>{{range .Owner}}<dt>{{.Name}}</dt><dd>{{.Value}}</dd>{{end}}<dt>Feed</dt><dd>{{.Source}}</dd>
<dt>Exposure</dt><dd>{{.Breaches}} breach{{if ne .Breaches 1}}es{{end}}{{if .PlaintextPassword}}, a plaintext password{{end}}{{if .FieldsExposed}}; exposed: {{join .FieldsExposed}}{{end}}</dd>
<dt>Since</dt><dd>{{when .Since}}</dd>
<dt>Last seen</dt><dd>read from the API {{when .LastRefresh}}{{if not .CriticalAt.IsZero}}; critical alert {{when .CriticalAt}}{{end}}</dd>
{{with .Acknowledgement}}<dt>Acknowledged</dt><dd>by {{.By}} at {{when .HandledAt}} ({{.Origin}}){{if .Comment}}: {{.Comment}}{{end}}<br>
{{if .Covers}}<span class="handled">handled</span> since {{when .Effective}}{{else}}<span class="open">open again</span>: news after {{when .Effective}}{{end}}</dd>{{end}}
</dl>{{end}}
{{define "list"}}{{template "head" .}}
{{if not .Rows}}<p>No acknowledgement is in force.</p>{{end}}
{{range .Rows}}<section aria-label="{{.Address}} {{.Source}}">{{template "row" .}}
<p><a href="acknowledge?address={{.Address}}&amp;source={{.Source}}">Acknowledge again</a></p>
{{if and $.Token (eq .Acknowledgement.Origin "page")}}<form method="post" action="acknowledge">
<input type="hidden" name="action" value="withdraw"><input type="hidden" name="address" value="{{.Address}}"><input type="hidden" name="source" value="{{.Acknowledgement.Source}}">
<input type="hidden" name="csrf_token" value="{{$.Token}}"><button type="submit">Withdraw this acknowledgement</button></form>{{end}}
</section>{{end}}
{{if .More}}<p>And {{.More}} more not listed; the API lists them too.</p>{{end}}
{{template "foot" .}}{{end}}
{{define "page"}}{{template "head" .}}
{{range .Rows}}<section aria-label="{{.Address}} {{.Source}}">{{template "row" .}}</section>{{end}}
{{if .Token}}<form method="post" action="acknowledge">
<input type="hidden" name="action" value="acknowledge"><input type="hidden" name="address" value="{{.Address}}">
<label for="source">Feed</label><select id="source" name="source">
<option value=""{{if eq .Source ""}} selected{{end}}>every feed</option>{{range .Feeds}}<option value="{{.}}"{{if eq . $.Source}} selected{{end}}>{{.}}</option>{{end}}</select>
<label for="by">Handled by</label><input id="by" name="by" value="{{.By}}" required maxlength="{{.MaxBy}}" autocomplete="name">
<label for="comment">Comment (what was done)</label><textarea id="comment" name="comment" rows="3" maxlength="{{.MaxComment}}"></textarea>
<input type="hidden" name="csrf_token" value="{{.Token}}">
<button type="submit" autofocus>Acknowledge</button></form>{{end}}
{{template "foot" .}}{{end}}
{{define "error"}}{{template "head" .}}<p><a href="acknowledgements">Back to the acknowledgements</a></p>{{template "foot" .}}{{end}}`

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"join": func(s []string) string { return strings.Join(s, ", ") },
	"when": func(t time.Time) template.HTML {
		if t.IsZero() {
			return "never"
		}
		s := t.UTC().Format(time.RFC3339)
		return template.HTML(`<time datetime="` + s + `">` + strings.Replace(s, "T", " ", 1) + `</time>`)
	},
}).Parse(layout))

// pageData is what a page shows.
type pageData struct {
	Title, Notice   string
	Rows            []Row
	More            int
	Address, Source string
	Feeds           []string
	By, Token       string
	MaxBy           int
	MaxComment      int
}

// writeToken returns the CSRF token of r's user and sets it as the
// SameSite cookie too; "" (no form shown) with writing off or no user, and
// a note saying why.
func (h *Handler) writeToken(w http.ResponseWriter, r *http.Request) (token, user, note string) {
	if !h.o.Write {
		return "", "", "Writing acknowledgements is off (--web.enable-acknowledgements): this page only shows them."
	}
	user, _, err := h.auth().user(r)
	if err != nil {
		return "", "", "You cannot acknowledge here: " + err.Error()
	}
	token = xsrftoken.Generate(h.key, user, csrfAction)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: token, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(xsrftoken.Timeout / time.Second)})
	return token, user, ""
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	rows, more := h.listed()
	token, _, note := h.writeToken(w, r)
	h.render(w, http.StatusOK, "list", pageData{Title: "Acknowledgements in force", Notice: note, Rows: rows, More: more, Token: token})
}

// page is the acknowledgement page of one address (by label) and,
// optionally, one feed: what is exposed and acknowledged, and the form.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	e, ok := h.find(q.Get("address"))
	if !ok {
		h.render(w, http.StatusNotFound, "error", pageData{Title: "Not found", Notice: "No watched address has that label."})
		return
	}
	d := pageData{Title: "Acknowledge " + e.Label, Address: e.Label, Source: q.Get("source"),
		MaxBy: acknowledge.MaxByBytes, MaxComment: acknowledge.MaxCommentBytes}
	for _, row := range rowsOf(&e, h.o.Config.Load().Acknowledgements) {
		d.Feeds = append(d.Feeds, row.Source)
		if d.Source == "" || row.Source == d.Source {
			d.Rows = append(d.Rows, row)
		}
	}
	d.Token, d.By, d.Notice = h.writeToken(w, r)
	h.render(w, http.StatusOK, "page", d)
}

// submit is the form's POST: acknowledge or withdraw, then back to the
// list (303, so that a reload of the list does not post again).
func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	wr, ref := h.guard(r, h.checkForm)
	if ref == nil {
		q := request{Address: r.PostForm.Get("address"), Source: r.PostForm.Get("source"), By: r.PostForm.Get("by"), Comment: r.PostForm.Get("comment")}
		switch r.PostForm.Get("action") {
		case "acknowledge":
			_, ref = h.acknowledge(wr, q)
		case "withdraw":
			ref = h.withdraw(wr, q)
		default:
			ref = h.count(refuse(http.StatusBadRequest, "invalid", "unknown action"))
		}
	}
	if ref != nil {
		h.render(w, ref.status, "error", pageData{Title: http.StatusText(ref.status), Notice: ref.msg})
		return
	}
	// Relative, unlike http.Redirect's: it stays under a proxy's prefix.
	w.Header().Set("Location", "acknowledgements")
	w.WriteHeader(http.StatusSeeOther)
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, d); err != nil {
		level.Warn(h.o.Logger).Log("msg", "Rendering the acknowledgement page failed", "page", name, "err", err)
	}
}
