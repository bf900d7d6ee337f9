package sqlinbox

import (
	"context"
	"sync"
)

// detachedAfterClaim returns a context for database/sql's BeginTx that follows parent until
// detach is called, and then never ends. database/sql rolls a transaction back when the
// context it began with is done; the inbox wants that while it claims (a cancelled delivery
// stops waiting), but not later: the middleware, not a subscriber closing down, decides
// whether a handler's transaction commits.
func detachedAfterClaim(parent context.Context) (ctx context.Context, detach func()) {
	d := &detachable{Context: context.WithoutCancel(parent), parent: parent, done: make(chan struct{})}
	stop := context.AfterFunc(parent, d.end)
	return d, func() { stop() }
}

type detachable struct {
	context.Context // values, and no deadline
	parent          context.Context
	done            chan struct{}
	once            sync.Once
	err             error
	mu              sync.Mutex
}

func (d *detachable) end() {
	d.once.Do(func() {
		d.mu.Lock()
		d.err = d.parent.Err()
		d.mu.Unlock()
		close(d.done)
	})
}

func (d *detachable) Done() <-chan struct{} { return d.done }

func (d *detachable) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}
