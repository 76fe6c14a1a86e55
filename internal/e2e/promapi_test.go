// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// httpTimeout bounds every request the test sends.
const httpTimeout = 10 * time.Second

var httpClient = &http.Client{Timeout: httpTimeout}

// httpGet sends a GET of url with the test's client.
func httpGet(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return httpClient.Do(req)
}

// getOK answers nil when a GET of url answers 200.
func getOK(ctx context.Context, url string) error {
	_, err := getBody(ctx, url)
	return err
}

// getBody returns the body of a GET of url that answers 200.
func getBody(ctx context.Context, url string) ([]byte, error) {
	resp, err := httpGet(ctx, url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, err
}

// promAPI is the part of Prometheus's HTTP API the test reads.
type promAPI struct {
	base string // http://host:port
}

// get decodes the data of a successful answer into out. An error answer, and
// any warning, is an error: a query that Prometheus warns about is broken.
func (p promAPI) get(ctx context.Context, path string, params url.Values, out any) error {
	u := p.base + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	resp, err := httpGet(ctx, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	var answer struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Warnings  []string        `json:"warnings"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("%s: %s, not an API answer: %.200q", path, resp.Status, body)
	}
	switch {
	case answer.Status != "success":
		return fmt.Errorf("%s: %s: %s", path, answer.ErrorType, answer.Error)
	case len(answer.Warnings) > 0:
		return fmt.Errorf("%s: warnings: %s", path, strings.Join(answer.Warnings, "; "))
	}
	return json.Unmarshal(answer.Data, out)
}

// series is one result series; an instant query's series has one value.
type series struct {
	Labels map[string]string
	Values []float64
}

func (s series) last() float64 { return s.Values[len(s.Values)-1] }

// query runs expr as an instant query at the current time.
func (p promAPI) query(ctx context.Context, expr string) ([]series, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var vector []struct {
			Metric map[string]string `json:"metric"`
			Value  samplePair        `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vector); err != nil {
			return nil, err
		}
		result := make([]series, len(vector))
		for i, s := range vector {
			result[i] = series{Labels: s.Metric, Values: []float64{float64(s.Value)}}
		}
		return result, nil
	case "scalar":
		var value samplePair
		if err := json.Unmarshal(data.Result, &value); err != nil {
			return nil, err
		}
		return []series{{Values: []float64{float64(value)}}}, nil
	default:
		return nil, fmt.Errorf("unexpected result type %q", data.ResultType)
	}
}

// queryRange runs expr over [end-window, end] as Grafana draws a graph.
func (p promAPI) queryRange(ctx context.Context, expr string, window, step time.Duration) ([]series, error) {
	end := time.Now()
	params := url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(end.Add(-window).Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values []samplePair      `json:"values"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query_range", params, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("unexpected result type %q", data.ResultType)
	}
	result := make([]series, len(data.Result))
	for i, s := range data.Result {
		result[i] = series{Labels: s.Metric}
		for _, v := range s.Values {
			result[i].Values = append(result[i].Values, float64(v))
		}
	}
	return result, nil
}

// labelValues is what Grafana's label_values(selector, label) lists.
func (p promAPI) labelValues(ctx context.Context, label, selector string) ([]string, error) {
	var values []string
	err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{"match[]": {selector}}, &values)
	return values, err
}

// samplePair decodes the API's [unix time, "value"] pair to its value.
type samplePair float64

func (s *samplePair) UnmarshalJSON(b []byte) error {
	var pair []any
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("sample %s is not a [time, value] pair", b)
	}
	text, ok := pair[1].(string)
	if !ok {
		return errors.New("sample value is not a string")
	}
	v, err := strconv.ParseFloat(text, 64)
	*s = samplePair(v)
	return err
}

// target is an active scrape target.
type target struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

func (p promAPI) activeTargets(ctx context.Context) ([]target, error) {
	var data struct {
		ActiveTargets []target `json:"activeTargets"`
	}
	err := p.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data)
	return data.ActiveTargets, err
}

// loadedRule is a rule as Prometheus loaded and last evaluated it.
type loadedRule struct {
	Group          string
	Name           string    `json:"name"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (p promAPI) rules(ctx context.Context) ([]loadedRule, error) {
	var data struct {
		Groups []struct {
			Name  string       `json:"name"`
			Rules []loadedRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var rules []loadedRule
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			rules = append(rules, r)
		}
	}
	return rules, nil
}

// activeAlert is a pending or firing alert of Prometheus's rules.
type activeAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`    // the expression's value, as text
	ActiveAt    time.Time         `json:"activeAt"` // pending or firing since, without a break
}

func (p promAPI) alerts(ctx context.Context) ([]activeAlert, error) {
	var data struct {
		Alerts []activeAlert `json:"alerts"`
	}
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// amAPI is the part of Alertmanager's API v2 the test reads.
type amAPI struct {
	base string // http://host:port
}

// amAlert is an alert as Alertmanager holds it.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State string `json:"state"` // active, suppressed (silenced or inhibited), unprocessed
	} `json:"status"`
}

// alerts lists every alert Alertmanager has received and not yet resolved.
func (a amAPI) alerts(ctx context.Context) ([]amAlert, error) {
	resp, err := httpGet(ctx, a.base+"/api/v2/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("Alertmanager /api/v2/alerts: %s %.200q", resp.Status, body)
	}
	var out []amAlert
	return out, json.Unmarshal(body, &out)
}
