package inboxhttp

import (
	"context"
	"net/http"
	"time"
)

// readyTimeout bounds one readiness check, so that a database that does not answer makes
// the probe fail instead of hang, whatever the prober's own timeout.
const readyTimeout = 5 * time.Second

// Ready returns an [http.Handler] for a readiness probe (a Kubernetes readinessProbe, a load
// balancer's health check) that asks store whether it can process messages now: it runs the
// store's CheckTable (sqlinbox.Store's reads the table's shape from the database's catalog,
// so the database must answer, and on a multi-statement store also checks its driver and
// server) and answers 200 with "ready" when it passes, and 503 Service Unavailable with the
// reason when the database is away, the table is missing or cannot guard against
// duplicates, or the check takes more than 5 s. An orchestrator then holds traffic while
// the database is away instead of having messages fail.
//
// A check that passes is also the store's verdict: a table fixed while the service runs is
// used at once. The reason names the table and what is wrong with it: serve the handler where
// only the orchestrator reads it (an internal port), as a health endpoint usually is.
//
//	mux.Handle("GET /readyz", inboxhttp.Ready(store))
func Ready(store interface{ CheckTable(context.Context) error }) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := store.CheckTable(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}
