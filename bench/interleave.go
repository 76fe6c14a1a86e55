// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"time"
)

// roundSlices is how many slices a round's timed alerts are sent in, the
// targets of the round taking turns slice by slice. On a shared machine
// the load from elsewhere changes within a second; a target measured
// a whole round after another (one to two seconds) met other load than
// it, and the ratio of two such rounds moved by ±30% with nothing changed
// in either. Slices of a tenth of a second, in an order that turns over
// every slice, meet the same load.
const roundSlices = 10

// slicedTarget is one target of an interleaved round, with its own
// keep-alive connections kept over the round's slices.
type slicedTarget struct {
	url       string
	client    *http.Client
	transport *http.Transport
	// settle, when set, runs after each of the target's slices, with the
	// number of alerts sent to it so far: it waits until the target has
	// done all it does with them (the store's count), so that none of its
	// work runs into another target's slice.
	settle func(sent int) error
	// otherCPU, when set, is the CPU time used so far by the processes
	// beside this one that the target uses (redis-server).
	otherCPU func() (time.Duration, error)
}

func newSlicedTarget(url string, clients int) *slicedTarget {
	transport := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	return &slicedTarget{url: url, transport: transport, client: &http.Client{Transport: transport}}
}

func (t *slicedTarget) close() { t.transport.CloseIdleConnections() }

// slicedResult is one target's interleaved round.
type slicedResult struct {
	roundResult
	// sliceRates is the rate of each slice, in the order sent: a slice of
	// one target and the same slice of another ran next to each other.
	sliceRates []float64
	// settled is the time from the start of each slice until settle
	// returned, over the slices: the rate at which the target finished
	// what it was sent, not only answered it.
	settled time.Duration
}

// sliceOrder is the order the targets take their turns in for slice k:
// rotated every other slice and reversed every other one, so that with
// two targets it runs AB BA BA AB, and each target goes first, last and
// after each other as often.
func sliceOrder(k, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = (i + k/2) % n
	}
	if k%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// interleavedRound warms every target up with warm, then sends timed to
// each in roundSlices slices, the targets taking turns (sliceOrder), and
// returns each target's rate (timed alerts over the time sending them),
// allocations and CPU per timed alert. Any answer but 204 fails it.
func interleavedRound(targets []*slicedTarget, warm, timed []signedAlert, clients int) ([]slicedResult, error) {
	res := make([]slicedResult, len(targets))
	elapsed := make([]time.Duration, len(targets))
	for i, t := range targets {
		if _, err := sendAllWith(t.client, t.url, warm, clients); err != nil {
			return nil, fmt.Errorf("target %d, warm-up: %w", i, err)
		}
		if t.settle != nil {
			if err := t.settle(len(warm)); err != nil {
				return nil, fmt.Errorf("target %d, warm-up: %w", i, err)
			}
		}
	}
	for k := range roundSlices {
		part := timed[k*len(timed)/roundSlices : (k+1)*len(timed)/roundSlices]
		sentBefore := len(warm) + k*len(timed)/roundSlices
		for _, i := range sliceOrder(k, len(targets)) {
			took, err := sendSlice(targets[i], part, clients, sentBefore+len(part), &res[i])
			if err != nil {
				return nil, fmt.Errorf("target %d, slice %d: %w", i, k, err)
			}
			elapsed[i] += took
			res[i].sliceRates = append(res[i].sliceRates, float64(len(part))/took.Seconds())
		}
	}
	n := float64(len(timed))
	for i := range res {
		res[i].rate = n / elapsed[i].Seconds()
		res[i].allocs /= n
		res[i].cpuMicros /= n
	}
	return res, nil
}

// sendSlice sends part to t, settles it, and adds its allocations, CPU
// microseconds and settling time to into; it returns the time sending took.
func sendSlice(t *slicedTarget, part []signedAlert, clients, sent int, into *slicedResult) (time.Duration, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var other0, other1 time.Duration
	var err error
	if t.otherCPU != nil {
		if other0, err = t.otherCPU(); err != nil {
			return 0, err
		}
	}
	began, cpu0 := time.Now(), cpuTime()
	took, err := sendAllWith(t.client, t.url, part, clients)
	if err == nil && t.settle != nil {
		err = t.settle(sent)
	}
	settled, cpu := time.Since(began), cpuTime()-cpu0
	if err == nil && t.otherCPU != nil {
		other1, err = t.otherCPU()
	}
	runtime.ReadMemStats(&after)
	if err != nil {
		return 0, err
	}
	into.settled += settled
	into.allocs += float64(after.Mallocs - before.Mallocs)
	into.cpuMicros += float64((cpu + other1 - other0).Microseconds())
	return took, nil
}
