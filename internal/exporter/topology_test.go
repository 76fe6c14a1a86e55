// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The store topologies with replicas of the exporter: make
// store-topologies-test runs them (testkit.StoreTopologies).

// topologyAddresses are the addresses the replicas of a topology test
// watch: the claims spread their reads.
var topologyAddresses = []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com"}

// startTopology starts two replicas on the store section store, with an
// API stand-in; files are written into the config's folder first.
func startTopology(t *testing.T, store string, files map[string]string) (api *testkit.StandIn, one, two *replica) {
	t.Helper()
	api = testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	dir := t.TempDir()
	for name, content := range files {
		testkit.WriteFile(t, filepath.Join(dir, name), content)
	}
	writeConfig(t, dir, api.BaseURL(), store+fmt.Sprintf("addresses: [%s]\n", strings.Join(topologyAddresses, ", ")))
	return api, startReplica(t, dir, filepath.Join(dir, "one")), startReplica(t, dir, filepath.Join(dir, "two"))
}

// postAlerts posts n different alerts for address to each replica, each
// answered 204, and the first of them to both (one alert, twice).
func postAlerts(t *testing.T, address string, from, n int, rs ...*replica) {
	t.Helper()
	for i := from; i < from+n; i++ {
		r := rs[i%len(rs)]
		if c := r.post(t, alertNumbered(address, i)); c != 204 {
			t.Fatalf("alert %d answered %d, want 204", i, c)
		}
	}
}

// checkShared waits until both replicas count want alerts for address and
// serve every address read, and checks the budget held and
// that no store command failed after the start.
func checkShared(t *testing.T, api *testkit.StandIn, address string, want int, one, two *replica) {
	t.Helper()
	alerts := alertsOf(address)
	testkit.Eventually(t, fmt.Sprintf("%d alerts counted on both replicas", want), func() bool {
		return one.scrape(t)[alerts] == float64(want) && two.scrape(t)[alerts] == float64(want)
	})
	testkit.Eventually(t, "every address read and served verified on both", func() bool {
		s1, s2 := one.scrape(t), two.scrape(t)
		for _, a := range topologyAddresses {
			verified := testkit.Series("breach_address_state", "account", "default", "address", a, "state", "verified")
			if api.Reads(a) < 1 || s1[verified] != 1 || s2[verified] != 1 {
				return false
			}
		}
		return true
	})
	windows, _ := api.Windows(testkit.APIToken)
	for _, w := range windows {
		if w.RateLimited > 0 || w.Requests > 60 {
			t.Errorf("window %s: %d requests, %d answered 429", w.Start, w.Requests, w.RateLimited)
		}
	}
	up := testkit.Series("breach_exporter_store_up")
	testkit.Eventually(t, "store_up 1 on both", func() bool { return one.scrape(t)[up] == 1 && two.scrape(t)[up] == 1 })
	if got, want := shared(t, one), shared(t, two); got != want {
		t.Errorf("the replicas serve different states:\n%s\n---\n%s", got, want)
	}
}

// Two replicas on a 3-master Redis Cluster over TLS, with a CA made by
// the test and a client certificate, as an ACL user whose password is in
// a file: every address read, alerts counted exactly, no store command
// refused (before the hash tag, CROSSSLOT refused claims and publishes).
func TestTopologyClusterReplicas(t *testing.T) {
	testkit.StoreTopologies(t)
	cluster := testkit.StartRedisCluster(t, 3, "--user", "breach", "on", ">cluster-pw", "~{breach_exporter}:*", "+@all")
	store := fmt.Sprintf("store:\n  servers: [%s]\n  username: breach\n  password_file: store-password\n  tls: {ca_file: %s, cert_file: %s, key_file: %s}\n",
		strings.Join(cluster.Addrs, ", "), cluster.CA.File, cluster.CertFile, cluster.KeyFile)
	api, one, two := startTopology(t, store, map[string]string{"store-password": "cluster-pw\n"})
	postAlerts(t, "a@example.com", 0, 10, one, two)
	// One alert delivered to both: counted once.
	postAlerts(t, "a@example.com", 0, 1, two)
	checkShared(t, api, "a@example.com", 10, one, two)
	// The claims: each address read once between the two (a@example.com,
	// which the alerts make read again, aside).
	for _, a := range topologyAddresses[1:] {
		if n := api.Reads(a); n != 1 {
			t.Errorf("%s read %d times by the two replicas, want once", a, n)
		}
	}
	for _, r := range []*replica{one, two} {
		for series, v := range r.scrape(t) {
			if strings.HasPrefix(series, "breach_exporter_store_errors_total") && v != 0 {
				t.Errorf("%s = %v", series, v)
			}
		}
	}
}

// Two replicas through three Sentinels; the primary killed (SIGKILL)
// while alerts arrive: every alert answered 204 is counted, once, on both
// replicas after the failover, and the budget held.
func TestTopologySentinelFailoverReplicas(t *testing.T) {
	testkit.StoreTopologies(t)
	s := testkit.StartSentinels(t)
	store := fmt.Sprintf("store:\n  servers: [%s]\n  master_name: %s\n  sentinel_password_file: sentinel-password\n",
		strings.Join(s.Addrs, ", "), s.MasterName)
	api, one, two := startTopology(t, store, map[string]string{"sentinel-password": s.Password + "\n"})
	postAlerts(t, "a@example.com", 0, 10, one, two)
	s.Primary.Kill()
	postAlerts(t, "a@example.com", 10, 10, one, two)
	s.WaitFailover(t)
	postAlerts(t, "a@example.com", 20, 10, one, two)
	checkShared(t, api, "a@example.com", 30, one, two)
}
