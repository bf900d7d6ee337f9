package sqlinbox

import "time"

// SetRunnerClock replaces the runner's time.After and its jitter (a random duration in
// [0, n]; nil keeps the runner's), so that tests see every wait without waiting.
func SetRunnerClock(r *RetentionRunner, after func(time.Duration) <-chan time.Time, jitter func(n time.Duration) time.Duration) {
	r.after = after
	if jitter != nil {
		r.jitter = jitter
	}
}
