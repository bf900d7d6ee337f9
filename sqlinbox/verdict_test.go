package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// The verdict of multi-statement requests checks the server once, shares one check among
// concurrent messages and keeps a pass or a refusal for good; a check that could not run (a
// node not yet ready, a database down) is no verdict and is repeated by the next message.
func TestMultiStatementGuard(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	checks := 0
	var verdict error
	check := func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		checks++
		return verdict
	}
	setVerdict := func(err error) { mu.Lock(); verdict = err; mu.Unlock() }

	// Not yet ready, then refused: the refusal stands even when the check would pass later.
	logger := watermill.NewCaptureLogger()
	g := newVerdict(ErrMultiStatementRefused, 0, logger, "refused", nil)
	setVerdict(errors.New("Error 1047 (08S01): WSREP has not yet prepared node for application use"))
	for range 3 {
		if err := g.before(ctx, check); err == nil || errors.Is(err, ErrMultiStatementRefused) {
			t.Fatalf("err = %v, want the check's own error", err)
		}
	}
	if checks != 3 {
		t.Fatalf("%d checks after 3 that could not run, want 3", checks)
	}
	setVerdict(fmt.Errorf("%w (the server reports wsrep_on = ON)", ErrMultiStatementRefused))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := g.before(ctx, check); !errors.Is(err, ErrMultiStatementRefused) {
				t.Errorf("err = %v, want ErrMultiStatementRefused", err)
			}
		})
	}
	wg.Wait()
	setVerdict(nil)
	if err := g.before(ctx, check); !errors.Is(err, ErrMultiStatementRefused) || checks != 4 {
		t.Fatalf("after the refusal: err = %v after %d checks, want the refusal after 4", err, checks)
	}
	if logged := logger.Captured()[watermill.ErrorLogLevel]; len(logged) != 1 {
		t.Errorf("%d refusals logged at error level, want 1", len(logged))
	}

	// A pass stands too.
	g = newVerdict(ErrMultiStatementRefused, 0, nil, "refused", nil)
	checks = 0
	for range 5 {
		if err := g.before(ctx, check); err != nil {
			t.Fatal(err)
		}
	}
	setVerdict(fmt.Errorf("%w (the server reports wsrep_on = ON)", ErrMultiStatementRefused))
	if err := g.before(ctx, check); err != nil || checks != 1 {
		t.Fatalf("after the pass: err = %v after %d checks, want nil after 1", err, checks)
	}
}
