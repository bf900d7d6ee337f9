package sqlinbox

import (
	"context"

	"github.com/inboxkit/watermill-inbox/internal/pipelineprobe"
)

func init() {
	pipelineprobe.Waiting = func(store any) int { return store.(*Store).pool.(probed).waiting() }
	pipelineprobe.Observe = func(store any, observe func(int)) { store.(*Store).pool.(probed).observe(observe) }
}

// probed is a pool whose requests a combiner coalesces. A pipeline store's observer sees each
// pipeline; a coalesced store's each multi-statement request, alone or of several messages.
type probed interface {
	waiting() int
	observe(func(requests int))
}

func (p *pipelinePool) waiting() int         { return p.combiner.waiting() }
func (p *pipelinePool) observe(f func(int))  { p.combiner.observe(f) }
func (p *coalescedPool) waiting() int        { return p.combiner.waiting() }
func (p *coalescedPool) observe(f func(int)) { p.sent = f }

func (c *combiner[C]) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

func (c *combiner[C]) observe(f func(requests int)) {
	send := c.send
	c.send = func(ctx context.Context, conn C, requests []*pipelineRequest) {
		f(len(requests))
		send(ctx, conn, requests)
	}
}
