// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// notStopped is a stopping that never ends.
func notStopped() stopping {
	return stopping{drain: context.Background(), now: context.Background()}
}

// The first signal starts the drain, the second ends it now; a third
// changes nothing (and must not block the sender: the channel is main's).
func TestStopOnSignals(t *testing.T) {
	signals := make(chan os.Signal, 2)
	stop := stopOn(signals)
	if stop.drain.Err() != nil || stop.now.Err() != nil {
		t.Fatal("stopping before any signal")
	}
	signals <- syscall.SIGTERM
	<-stop.drain.Done()
	if stop.now.Err() != nil {
		t.Fatal("the first signal ended the drain too")
	}
	signals <- syscall.SIGINT
	<-stop.now.Done()
}

const drainTestSecret = "drain-test-secret"

// drainTestAlert is a signed alert of the kind the service sends.
var drainTestAlert = []byte(`{"event":"alert.created","severity":"critical","address":"alice@example.com",` +
	`"source":"combolist","summary":"drain %d","delta":{"previous_count":3,"new_count":5},` +
	`"observed_at":"2026-11-20T11:59:00Z"}`)

// drainTestArgs are the command line of a program with both listeners
// on free loopback ports, a config with the webhook secret, no state
// folder, and the shutdown delay given.
func drainTestArgs(t *testing.T, delay string) (web, hook string, args []string) {
	t.Helper()
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	testkit.WriteFile(t, filepath.Join(dir, "secret"), drainTestSecret+"\n")
	cfg := filepath.Join(dir, "breach_exporter.yml")
	testkit.WriteFile(t, cfg, "api: {base_url: http://127.0.0.1:1/api/v1, token_file: token}\n"+
		"addresses: [alice@example.com]\nwebhook: {secret_files: [secret]}\n")
	web, hook = testkit.FreeAddress(t), testkit.FreeAddress(t)
	return web, hook, []string{"--config.file", cfg, "--storage.path", "", "--web.listen-address", web,
		"--webhook.listen-address", hook, "--web.shutdown-delay", delay}
}

// waitServing waits until both listeners answer and /-/ready reads 200.
func waitServing(t *testing.T, web, hook string) {
	t.Helper()
	testkit.Eventually(t, "/-/ready to answer 200", func() bool {
		code, _ := testkit.Get(t, "http://"+web+"/-/ready")
		return code == http.StatusOK
	})
	testkit.Eventually(t, "the webhook listener to answer", func() bool {
		code, _ := testkit.Get(t, "http://"+hook+"/-/healthy")
		return code == http.StatusOK
	})
}

// startProgram runs the program with both listeners and the shutdown
// delay given, until the test cancels the returned stopping's contexts.
func startProgram(t *testing.T, delay string) (web, hook string, drain, now context.CancelFunc, exited <-chan int) {
	t.Helper()
	web, hook, args := drainTestArgs(t, delay)
	drainCtx, drain := context.WithCancel(context.Background())
	nowCtx, now := context.WithCancel(context.Background())
	t.Cleanup(now)
	t.Cleanup(drain)
	done := make(chan int, 1)
	var out testkit.SyncBuffer
	go func() {
		done <- run(stopping{drain: drainCtx, now: nowCtx}, args, &out, &out)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", out.String())
		}
	})
	waitServing(t, web, hook)
	return web, hook, drain, now, done
}

// postAlert posts a signed alert and returns the answer's status and
// whether the server asked to close the connection (0, false on an error).
func postAlert(t *testing.T, client *http.Client, hook string, n int) (int, bool) {
	t.Helper()
	body := []byte(fmt.Sprintf(string(drainTestAlert), n))
	resp, err := client.Do(testkit.SignedRequest(t, "http://"+hook+"/webhook", body, sim.Sign([]byte(drainTestSecret), body)))
	if err != nil {
		t.Errorf("POST %d: %v", n, err)
		return 0, false
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Close
}

// After the first signal the program reads not ready at once and both
// listeners keep answering through the shutdown delay: a signed alert is
// accepted (204), a scrape answers; the answers ask the client to
// reconnect. A second signal ends the delay (1 h here) at once, and the
// listeners close.
func TestShutdownDelayKeepsServing(t *testing.T) {
	web, hook, drain, now, exited := startProgram(t, "1h")
	client := &http.Client{Timeout: 10 * time.Second}
	if code, closing := postAlert(t, client, hook, 1); code != http.StatusNoContent || closing {
		t.Fatalf("before the signal: POST answered %d (close %v), want 204 on a kept-alive connection", code, closing)
	}

	drain()
	testkit.Eventually(t, "/-/ready to answer 503", func() bool {
		code, _ := testkit.Get(t, "http://"+web+"/-/ready")
		return code == http.StatusServiceUnavailable
	})
	for n := 2; n < 6; n++ {
		code, closing := postAlert(t, client, hook, n)
		if code != http.StatusNoContent || !closing {
			t.Errorf("during the delay: POST %d answered %d (close %v), want 204 with Connection: close", n, code, closing)
		}
	}
	if code, _ := testkit.Get(t, "http://"+web+"/metrics"); code != http.StatusOK {
		t.Errorf("during the delay: /metrics answered %d", code)
	}
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) during the delay", code)
	default:
	}

	now()
	exitsCleanly(t, exited, "after the second signal")
	if _, err := client.Post("http://"+hook+"/webhook", "application/json", nil); err == nil {
		t.Error("the webhook listener still answers after the exit")
	}
}

// Without a delay the first signal closes the listeners at once, as
// before the flag existed.
func TestNoShutdownDelay(t *testing.T) {
	_, _, drain, _, exited := startProgram(t, "0s")
	drain()
	exitsCleanly(t, exited, "after the first signal with no delay")
}

// exitsCleanly waits for run's exit code, which must be 0.
func exitsCleanly(t *testing.T, exited <-chan int, when string) {
	t.Helper()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("exit %d %s, want 0", code, when)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit %s", when)
	}
}

func TestReadiness(t *testing.T) {
	var fail error
	r := &readiness{Check: func() error { return fail }}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/-/ready", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != http.StatusOK {
		t.Errorf("ready: %d %q", code, body)
	}
	fail = errors.New("not in sync with the shared store")
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not in sync") {
		t.Errorf("check failing: %d %q, want 503 with its reason", code, body)
	}
	fail = nil
	r.startDraining()
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("draining: %d %q, want 503", code, body)
	}
}

// childArgsEnv makes the test binary run main with the arguments it holds
// (one a line): the signal test's child process.
const childArgsEnv = "BREACH_MAIN_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgsEnv); args != "" {
		os.Args = append([]string{name}, strings.Split(args, "\n")...)
		main()
		return
	}
	os.Exit(m.Run())
}

// The real signals, in a process of its own running main: SIGTERM starts
// the drain (not ready, a signed alert still accepted), SIGINT during a
// one-hour delay ends it at once with exit 0.
func TestSecondSignalEndsTheDelay(t *testing.T) {
	web, hook, args := drainTestArgs(t, "1h")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, "\n"))
	var out testkit.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("child's log:\n%s", out.String())
		}
	})
	waitServing(t, web, hook)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "/-/ready to answer 503 after SIGTERM", func() bool {
		code, _ := testkit.Get(t, "http://"+web+"/-/ready")
		return code == http.StatusServiceUnavailable
	})
	if code, _ := postAlert(t, &http.Client{Timeout: 10 * time.Second}, hook, 1); code != http.StatusNoContent {
		t.Errorf("after SIGTERM: POST answered %d, want 204", code)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("exit after the second signal: %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second signal did not end the one-hour delay")
	}
}
