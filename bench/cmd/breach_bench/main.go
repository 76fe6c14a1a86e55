// SPDX-License-Identifier: Apache-2.0

// Command breach_bench runs breach_exporter's benchmarks against their
// baselines (make bench), prints the table and writes results.json.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/breach-exporter/breach_exporter/bench"
)

func main() {
	// The scrape measurements re-run this binary, one process each.
	if len(os.Args) > 1 && os.Args[1] == bench.ScrapeChildCommand {
		if err := bench.ServeScrapeChild(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// The deployed baseline, too, runs in its own process.
	if len(os.Args) > 1 && os.Args[1] == bench.BaselineChildCommand {
		if err := bench.ServeBaselineChild(os.Args[2:], os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	if len(os.Args) > 1 && os.Args[1] == bench.CachedChildCommand {
		if err := bench.ServeCachedChild(os.Args[2:], os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	out := flag.String("out", "results.json", "where to write the results as JSON")
	quick := flag.Bool("quick", false, "small sizes, for checking the harness itself (the figures mean little)")
	strict := flag.Bool("strict", false, "exit 1 when a goal is missed")
	only := flag.String("only", "", "run one part alone: "+bench.OnlyParts+" (-out then holds that part only)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run (this process only) to this file")
	blockProfile := flag.String("blockprofile", "", "write a profile of where goroutines blocked to this file")
	flag.Parse()
	stopProfiles, err := startProfiles(*cpuProfile, *blockProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", err)
		os.Exit(1)
	}

	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", err)
		os.Exit(1)
	}
	opts := bench.SuiteOptions{
		Exe: exe,
		ScrapeSizes: []bench.ScrapeSize{
			{Addresses: 100, Scrapes: 30},
			{Addresses: 1000, Scrapes: 10},
			{Addresses: 10000, Scrapes: 3},
		},
		ScrapeRuns: 2,
		DeployedSizes: []bench.ScrapeSize{
			{Addresses: 1000, Scrapes: 10},
			{Addresses: 10000, Scrapes: 6},
			{Addresses: 20000, Scrapes: 4},
		},
		UserCost:         bench.UserCostOptions{Addresses: 10000, Scrapes: 5, ScrapeInterval: 15 * time.Second, Replicas: 3},
		Webhook:          bench.WebhookOptions{Clients: 32, Requests: 20000, Rounds: 5, Addresses: 100, AllocRuns: 2000},
		WebhookAccounts:  bench.WebhookAccountsOptions{Accounts: 20, Clients: 32, Requests: 20000, Rounds: 5, Addresses: 100},
		WebhookStore:     bench.WebhookOptions{Clients: 32, Requests: 20000, Rounds: 7, Addresses: 100},
		Replicas:         bench.ReplicasOptions{Replicas: 3, Addresses: 300, RequestsPerMinute: 60, Windows: 3},
		Only:             *only,
		BudgetRun:        20 * time.Minute,
		Budgets:          []int{60, 55},
		Planning:         bench.PlanningOptions{Small: 1000, Large: 100000, Requests: 20000, Runs: 5},
		Owners:           bench.OwnersOptions{Addresses: 100000, Files: 10},
		Checkpoint:       bench.CheckpointOptions{Addresses: 100000, QuietMinutes: 2, Starts: 2},
		LatencyAddresses: 4,
		LatencySamples:   5,
		Progress:         os.Stderr,
	}
	if *quick {
		opts.ScrapeSizes = []bench.ScrapeSize{{Addresses: 100, Scrapes: 3}, {Addresses: 1000, Scrapes: 2}}
		opts.ScrapeRuns = 1
		opts.DeployedSizes = []bench.ScrapeSize{{Addresses: 100, Scrapes: 3}, {Addresses: 500, Scrapes: 2}}
		opts.UserCost = bench.UserCostOptions{Addresses: 500, Scrapes: 3, ScrapeInterval: 2 * time.Second, Replicas: 3}
		opts.Webhook = bench.WebhookOptions{Clients: 4, Requests: 2000, Rounds: 1, Addresses: 10, AllocRuns: 200}
		opts.WebhookAccounts = bench.WebhookAccountsOptions{Accounts: 20, Clients: 4, Requests: 2000, Rounds: 1, Addresses: 10}
		opts.WebhookStore = bench.WebhookOptions{Clients: 4, Requests: 2000, Rounds: 1, Addresses: 10}
		opts.Replicas = bench.ReplicasOptions{Replicas: 3, Addresses: 300, RequestsPerMinute: 60, Run: 10 * time.Second}
		opts.BudgetRun = 3 * time.Minute
		opts.LatencySamples = 1
		opts.Planning = bench.PlanningOptions{Small: 100, Large: 10000, Requests: 200, Runs: 1}
		opts.Owners = bench.OwnersOptions{Addresses: 1000, Files: 10}
		opts.Checkpoint = bench.CheckpointOptions{Addresses: 1000, QuietMinutes: 1, Starts: 1}
	}

	report, err := bench.RunSuite(opts)
	if perr := stopProfiles(); perr != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", perr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", err)
		os.Exit(1)
	}
	if err := report.WriteTable(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", err)
		os.Exit(1)
	}
	if err := report.WriteJSON(*out); err != nil {
		fmt.Fprintln(os.Stderr, "breach_bench:", err)
		os.Exit(1)
	}
	fmt.Printf("\nwrote %s in %s\n", *out, report.Duration)
	missed := report.Missed()
	for _, f := range missed {
		fmt.Printf("goal missed: %s: %s %s (baseline %s, goal %s)\n", f.Name, fmtValue(f.Ours), f.Unit, fmtValue(f.Baseline), f.Goal)
	}
	if *strict && len(missed) > 0 {
		os.Exit(1)
	}
}

// startProfiles starts the profiles asked for; stop writes them.
func startProfiles(cpuPath, blockPath string) (stop func() error, err error) {
	var cpu *os.File
	if cpuPath != "" {
		if cpu, err = os.Create(cpuPath); err != nil {
			return nil, err
		}
		if err = pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	if blockPath != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if blockPath != "" {
			f, err := os.Create(blockPath)
			if err == nil {
				err = pprof.Lookup("block").WriteTo(f, 0)
				errs = append(errs, f.Close())
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}, nil
}

func fmtValue(v float64) string { return fmt.Sprintf("%.4g", v) }
