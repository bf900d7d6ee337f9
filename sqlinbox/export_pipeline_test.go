package sqlinbox

import "github.com/inboxkit/watermill-inbox/internal/pipelineprobe"

// ObservePipelines calls observe with the number of requests of each pipeline the store
// sends (a message's statements, or the read of a duplicate's committed claim), before it
// sends it. Call it before the store's first message.
func ObservePipelines(s *Store, observe func(requests int)) { pipelineprobe.Observe(s, observe) }

// PipelineWaiting returns how many requests wait for a pipeline.
func PipelineWaiting(s *Store) int { return pipelineprobe.Waiting(s) }
