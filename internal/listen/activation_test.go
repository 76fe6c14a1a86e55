// SPDX-License-Identifier: Apache-2.0

package listen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
)

// activatedChildEnv makes the test binary the child of the activation
// tests: TestActivatedChild then serves on the socket it was handed.
const activatedChildEnv = "BREACH_LISTEN_ACTIVATED_CHILD"

// TestActivatedChild is not a test on its own: it is the child process of
// the activation tests, which run the test binary again with
// activatedChildEnv set and a listening socket as fd 3. It opens the
// systemd sockets with Open, answers "activated <pid>" on them until its
// standard input closes, and exits 3 when Open fails.
func TestActivatedChild(t *testing.T) {
	if os.Getenv(activatedChildEnv) == "" {
		t.Skip("the child process of TestSocketActivation")
	}
	systemd, noConfig := true, ""
	flags := &web.FlagConfig{WebSystemdSocket: &systemd, WebConfigFile: &noConfig}
	listeners, err := Open(flags, Limit{Name: "activated", MaxConnections: 4})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "activated %d\n", os.Getpid())
	})}
	done := make(chan error, 1)
	go func() { done <- web.ServeMultiple(listeners, srv, flags, slog.New(slog.DiscardHandler)) }()
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// startActivated runs the test binary as TestActivatedChild with a
// listening socket as fd 3 and LISTEN_FDS=1, the way systemd hands one
// over. LISTEN_PID must be the child's own pid, known only once it runs:
// sh sets it to $$ and execs the child in its place, keeping the pid
// (systemd's own order: fork, set the variables, exec). With ownPID false
// it names another process instead.
func startActivated(t *testing.T, ownPID bool) (addr string, cmd *exec.Cmd, stdin io.WriteCloser, out *strings.Builder) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close() // the child holds the socket through f
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid := "$$"
	if !ownPID {
		pid = "1"
	}
	cmd = exec.Command("sh", "-c", `LISTEN_PID=`+pid+` exec "$0" "$@"`, os.Args[0], "-test.run=^TestActivatedChild$", "-test.v")
	cmd.Env = append(os.Environ(), activatedChildEnv+"=1", "LISTEN_FDS=1", "LISTEN_FDNAMES=webhook")
	cmd.ExtraFiles = []*os.File{f}
	out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return l.Addr().String(), cmd, stdin, out
}

// A socket handed over as systemd does is served
// by the process it was handed to, through Open.
func TestSocketActivation(t *testing.T) {
	addr, cmd, stdin, out := startActivated(t, true)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("child: %v\n%s", err, out)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("child did not stop when its stdin closed\n%s", out)
		}
	}()

	// The socket listens from the start: the request waits in its queue
	// until the child accepts it, however long the child takes to start.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET on the activated socket: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("activated %d\n", cmd.Process.Pid); string(body) != want {
		t.Errorf("got %q, want %q", body, want)
	}
}

// Sockets meant for another process (LISTEN_PID not ours) are not taken:
// Open fails instead of serving nothing.
func TestSocketActivationForAnotherProcess(t *testing.T) {
	_, cmd, stdin, out := startActivated(t, false)
	defer stdin.Close()
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(out.String(), "no socket activation file descriptors found") {
		t.Errorf("child with LISTEN_PID of another process: %v\n%s", err, out)
	}
}
