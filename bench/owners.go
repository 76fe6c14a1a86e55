// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"io"
	"os"
)

// OwnersOptions size the cost of owner labels: the built binary with its
// addresses in address files, plain and without breach_address_info (the
// exporter before owner labels) against file_sd-shaped with a team and an
// owner for every address. No Addresses: not measured.
type OwnersOptions struct {
	Addresses int `json:"addresses"`
	Files     int `json:"files"`
}

// OwnersResult is both runs, first starts (every address pending).
type OwnersResult struct {
	Owners   AddressFilesResult `json:"owners"`
	Baseline AddressFilesResult `json:"baseline"`
}

// Goals: owner labels cost one series per address (breach_address_info,
// the only series that carries them), and a moved address is served with
// its new labels within the file watch's 1 s debounce and one more second
// (the "refresh interval + 1 s"; a watched file has no interval of
// its own).
const (
	goalOwnerSeries        = 1
	goalOwnerChangeSeconds = 2.0
)

func measureOwners(r *Report, o OwnersOptions, progress io.Writer) error {
	if o.Addresses == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "breach-bench-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(progress, "owners: building %s\n", ExporterPackage)
	bin, err := BuildExporter(dir)
	if err != nil {
		return err
	}
	var res OwnersResult
	fmt.Fprintf(progress, "owners: %d addresses in %d plain files, no breach_address_info\n", o.Addresses, o.Files)
	if res.Baseline, err = MeasureAddressFiles(bin, AddressFilesOptions{Addresses: o.Addresses, Files: o.Files, NoInfo: true}); err != nil {
		return fmt.Errorf("owners, baseline: %w", err)
	}
	fmt.Fprintf(progress, "owners: %d addresses in %d file_sd files, a team and an owner each\n", o.Addresses, o.Files)
	if res.Owners, err = MeasureAddressFiles(bin, AddressFilesOptions{Addresses: o.Addresses, Files: o.Files, Owners: true}); err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	r.Owners = &res
	return nil
}

func ownersFigures(o *OwnersResult) []Figure {
	if o == nil {
		return nil
	}
	n := fmt.Sprintf("%d", o.Owners.Addresses)
	ours, base := o.Owners, o.Baseline
	return []Figure{
		newFigure("owner labels: series per address", "series", ours.SeriesPerAddress, base.SeriesPerAddress, "no owner labels, no info").
			withGoal(fmt.Sprintf("<= +%d", goalOwnerSeries), ours.SeriesPerAddress-base.SeriesPerAddress <= goalOwnerSeries),
		newFigure("owner labels: RSS at "+n+" addresses", "MiB", mib(ours.RSSBytes), mib(base.RSSBytes), "no owner labels, no info"),
		newFigure("owner labels: heap in use at "+n+" addresses", "MiB", ours.HeapInuseBytes/(1<<20), base.HeapInuseBytes/(1<<20), "no owner labels, no info"),
		newFigure("owner labels: a moved address served, at "+n, "s", ours.ChangeSeconds, base.ChangeSeconds, "a plain file's change").
			withGoal(fmt.Sprintf("< %.0f s", goalOwnerChangeSeconds), ours.ChangeSeconds < goalOwnerChangeSeconds),
	}
}
