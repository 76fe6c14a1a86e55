package ratelog

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
)

// One line per reason per interval, each carrying how many it stands for.
func TestOneLinePerReasonPerInterval(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := New(time.Minute, clock)
	var out bytes.Buffer
	logger := log.NewLogfmtLogger(&out)
	for range 1000 {
		l.Log(logger, "ENOSPC", "msg", "write failed")
	}
	l.Log(logger, "EIO", "msg", "sync failed")
	if got, want := out.String(), "msg=\"write failed\" suppressed=0\nmsg=\"sync failed\" suppressed=0\n"; got != want {
		t.Fatalf("first minute:\n%s\nwant\n%s", got, want)
	}
	out.Reset()
	clock.Advance(59 * time.Second)
	l.Log(logger, "ENOSPC", "msg", "write failed")
	if out.Len() != 0 {
		t.Fatalf("a line within the interval: %q", out.String())
	}
	clock.Advance(time.Second)
	l.Log(logger, "ENOSPC", "msg", "write failed")
	if got := strings.TrimSpace(out.String()); got != `msg="write failed" suppressed=1000` {
		t.Fatalf("after the interval: %q", got)
	}
}

// The caller's keyvals are not changed by the count appended to them.
func TestKeyvalsUntouched(t *testing.T) {
	l := New(time.Minute, clockwork.NewFakeClock())
	kv := make([]any, 2, 4)
	kv[0], kv[1] = "msg", "x"
	l.Log(log.NewNopLogger(), "r", kv...)
	if len(kv) != 2 {
		t.Fatalf("keyvals grew to %d", len(kv))
	}
	// The spare capacity must not have been written by an append either.
	if kv2 := kv[:4]; kv2[2] != nil {
		t.Fatalf("the caller's backing array was written: %v", kv2)
	}
}
