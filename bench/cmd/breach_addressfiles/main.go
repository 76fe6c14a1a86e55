// SPDX-License-Identifier: Apache-2.0

// Command breach_addressfiles measures the exporter with its addresses in
// address files (bench.MeasureAddressFiles): start to the first scrape,
// RSS, and a changed file to the scrape that shows it. Apart from
// breach_bench, whose run it would lengthen by the size it needs:
//
//	go run ./cmd/breach_addressfiles -addresses 100000 -files 10 [-restored=false] [-owners] [-no-info]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/breach-exporter/breach_exporter/bench"
)

func main() {
	n := flag.Int("addresses", 100_000, "addresses across the files")
	files := flag.Int("files", 10, "address files")
	restored := flag.Bool("restored", true, "restore every address's full state from a snapshot (false: a first start)")
	owners := flag.Bool("owners", false, "file_sd-shaped files (addresses_sd_files), every address with a team and an owner")
	noInfo := flag.Bool("no-info", false, "metrics.address_info: false (the exporter before owner labels)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "breach-addressfiles-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	bin, err := bench.BuildExporter(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res, err := bench.MeasureAddressFiles(bin, bench.AddressFilesOptions{
		Addresses: *n, Files: *files, Restored: *restored, Owners: *owners, NoInfo: *noInfo,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	fmt.Printf("per address: %.1f KiB RSS (peak %.1f KiB)\n", float64(res.RSSBytes)/1024/float64(*n), float64(res.PeakRSSBytes)/1024/float64(*n))
}
