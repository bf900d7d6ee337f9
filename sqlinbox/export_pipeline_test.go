package sqlinbox

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ObservePipelines calls observe with the number of requests of each pipeline the store
// sends (a message's statements, or the read of a duplicate's committed claim), before it
// sends it. Call it before the store's first message.
func ObservePipelines(s *Store, observe func(requests int)) {
	c := s.pool.(*pipelinePool).combiner
	send := c.send
	c.send = func(ctx context.Context, conn *pgxpool.Conn, requests []*pipelineRequest) {
		observe(len(requests))
		send(ctx, conn, requests)
	}
}

// PipelineWaiting returns how many requests wait for a pipeline.
func PipelineWaiting(s *Store) int {
	c := s.pool.(*pipelinePool).combiner
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
