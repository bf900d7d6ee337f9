package sqlinbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// verdict runs a check before a store first relies on what it checks, and keeps the verdict:
// a pass for good (an atomic load per message after it), a refusal (an error wrapping
// refusal) for keep (0: for good) and, logged once, and no verdict for any other error (the
// database is down), which the next message repeats. The messages that arrive while a check
// runs wait for it.
type verdict struct {
	refusal error
	keep    time.Duration
	logger  watermill.LoggerAdapter
	logMsg  string // what the log line of a refusal says
	fields  watermill.LogFields
	now     func() time.Time

	passed atomic.Bool
	mu     sync.Mutex // one check at a time
	// refused is the standing refusal, given at refusedAt.
	refused   error
	refusedAt time.Time
}

func newVerdict(refusal error, keep time.Duration, logger watermill.LoggerAdapter, logMsg string, fields watermill.LogFields) *verdict {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &verdict{refusal: refusal, keep: keep, logger: logger, logMsg: logMsg, fields: fields, now: time.Now}
}

// before returns nil once the check passed, the refusal while one stands, and runs the check
// when neither does.
func (v *verdict) before(ctx context.Context, check func(context.Context) error) error {
	if v.passed.Load() {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.passed.Load() {
		return nil
	}
	if v.refused != nil && (v.keep == 0 || v.now().Sub(v.refusedAt) < v.keep) {
		return v.refused
	}
	return v.checkLocked(ctx, check)
}

// check runs check now, whatever verdict stands, and keeps its verdict.
func (v *verdict) check(ctx context.Context, check func(context.Context) error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checkLocked(ctx, check)
}

func (v *verdict) checkLocked(ctx context.Context, check func(context.Context) error) error {
	err := check(ctx)
	switch {
	case err == nil:
		v.refused = nil
		v.passed.Store(true)
	case errors.Is(err, v.refusal):
		v.passed.Store(false)
		v.refused, v.refusedAt = err, v.now()
		v.logger.Error(v.logMsg, err, v.fields)
	}
	return err
}
