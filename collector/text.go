// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"math"
	"strconv"
	"strings"
)

// The text exposition format (version 0.0.4), written by hand so that an
// address's lines can be rendered once and copied into every scrape. For a
// series whose labels are given in some order, every function here writes
// the bytes expfmt's text encoder writes for a metric with those labels in
// that order (FuzzRenderingIsExpfmts, for any values; TestRenderingIsExpfmts,
// for a whole scrape). The order is each family's labels, address first:
// not the name order client_golang's registry would give, which neither
// Prometheus nor the text format require (TestServedLabelsAreTheFamilys
// holds every series to its family's labels).

// familyHeader is a family's HELP and TYPE lines.
func familyHeader(name, help, typ string) []byte {
	var b []byte
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, helpEscaper.Replace(help)...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	return append(b, '\n')
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// label is one label pair; value is unescaped.
type label struct{ name, value string }

// appendSeries appends one series line: name{labels} value, the labels in
// the order given: the family's (family.labels).
func appendSeries(b []byte, name string, v float64, labels ...label) []byte {
	b = append(b, name...)
	if len(labels) > 0 {
		b = append(b, '{')
		for i, l := range labels {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, l)
		}
		b = append(b, '}')
	}
	return appendValue(b, v)
}

// appendAddressSeries is appendSeries for a per-address series, whose
// labels are the address and then more, without building their slice.
func appendAddressSeries(b []byte, name string, v float64, address label, more ...label) []byte {
	b = append(b, name...)
	b = append(b, '{')
	b = appendLabel(b, address)
	for _, l := range more {
		b = append(b, ',')
		b = appendLabel(b, l)
	}
	b = append(b, '}')
	return appendValue(b, v)
}

func appendLabel(b []byte, l label) []byte {
	b = append(b, l.name...)
	b = append(b, `="`...)
	b = appendEscaped(b, l.value)
	return append(b, '"')
}

func appendValue(b []byte, v float64) []byte {
	b = append(b, ' ')
	b = appendFloat(b, v)
	return append(b, '\n')
}

func appendEscaped(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\\\n\"") {
		return append(b, s...)
	}
	return append(b, valueEscaper.Replace(s)...)
}

// appendFloat formats v as expfmt's text encoder does.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
