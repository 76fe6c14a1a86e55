// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Figure is one measured number next to its baseline. Ratio is
// Ours/Baseline; Met says whether the goal holds (nil when the figure has
// no goal of its own).
type Figure struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Ours     float64 `json:"ours"`
	Baseline float64 `json:"baseline"`
	// BaselineName says what the baseline is, e.g. "bare HMAC net/http".
	BaselineName string  `json:"baseline_name"`
	Ratio        float64 `json:"ratio"`
	Goal         string  `json:"goal,omitempty"`
	Met          *bool   `json:"met,omitempty"`
}

func newFigure(name, unit string, ours, baseline float64, baselineName string) Figure {
	f := Figure{Name: name, Unit: unit, Ours: ours, Baseline: baseline, BaselineName: baselineName}
	if baseline != 0 {
		f.Ratio = ours / baseline
	}
	return f
}

// withRatio replaces Ours/Baseline with a ratio measured more robustly,
// such as the median of paired rounds.
func (f Figure) withRatio(ratio float64) Figure {
	f.Ratio = ratio
	return f
}

// withGoal records the goal's text and whether it holds.
func (f Figure) withGoal(goal string, met bool) Figure {
	f.Goal, f.Met = goal, &met
	return f
}

// Machine describes where the figures were measured.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	GOMAXPROCS int    `json:"gomaxprocs"`
}

// ThisMachine reads the CPU model from /proc/cpuinfo when there is one.
func ThisMachine() Machine {
	return Machine{
		CPUs:       runtime.NumCPU(),
		CPUModel:   cpuModel(),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}

// loadAverage is the first three fields of /proc/loadavg, "" where there
// is none.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(data))
	return strings.Join(fields[:min(3, len(fields))], " ")
}

// Report is everything one run measured; results.json is its JSON.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	// Load averages (1, 5, 15 min) from /proc/loadavg when the run started
	// and ended: other work on the machine slows the figures down.
	LoadBefore string         `json:"load_before,omitempty"`
	LoadAfter  string         `json:"load_after,omitempty"`
	Figures    []Figure       `json:"figures"`
	Webhook    *WebhookResult `json:"webhook,omitempty"`
	// WebhookAccounts is intake with many accounts against one.
	WebhookAccounts *WebhookAccountsResult `json:"webhook_accounts,omitempty"`
	// WebhookStore is intake with the store against without; Replicas
	// polling with several replicas sharing one key.
	WebhookStore *WebhookStoreResult `json:"webhook_store,omitempty"`
	Replicas     *ReplicasResult     `json:"replicas,omitempty"`
	// Checkpoint is the store's checkpoint at scale.
	Checkpoint *CheckpointResult `json:"checkpoint,omitempty"`
	// Scrape is the collector alone, in process; Deployed the built
	// binary over HTTP.
	Scrape   []ScrapePair     `json:"scrape,omitempty"`
	Deployed []DeployedResult `json:"deployed,omitempty"`
	Budget   []BudgetResult   `json:"budget,omitempty"`
	// Planning is the scheduler's cost per request, small size first.
	Planning []PlanningResult `json:"planning,omitempty"`
	Latency  *LatencyResult   `json:"alert_latency,omitempty"`
	// UserCost is a real Prometheus scraping the binary, default against
	// every detail family.
	UserCost *UserCostResult `json:"user_cost,omitempty"`
	// Owners is the cost of owner labels.
	Owners *OwnersResult `json:"owners,omitempty"`
}

// Missed lists the figures whose goal does not hold.
func (r *Report) Missed() []Figure {
	var missed []Figure
	for _, f := range r.Figures {
		if f.Met != nil && !*f.Met {
			missed = append(missed, f)
		}
	}
	return missed
}

// WriteTable prints the figures as an aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s %s/%s; load average %s at the start, %s at the end\n\n",
		m.CPUs, m.CPUModel, m.GoVersion, m.OS, m.Arch, r.LoadBefore, r.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tours\tbaseline\tbaseline is\tratio\tgoal\tmet")
	for _, f := range r.Figures {
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		ratio := "-"
		if f.Baseline != 0 {
			ratio = fmt.Sprintf("%.3f", f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, f.Unit,
			formatNumber(f.Ours), formatNumber(f.Baseline), f.BaselineName, ratio, f.Goal, met)
	}
	return tw.Flush()
}

// formatNumber keeps small values readable and big ones short.
func formatNumber(v float64) string {
	switch abs := max(v, -v); {
	case abs == 0:
		return "0"
	case abs >= 1e6:
		return fmt.Sprintf("%.4g", v)
	case abs >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// WriteJSON writes the report, indented, to path.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
