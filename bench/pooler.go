package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// poolerServerConns is the server connections PgBouncer keeps in the pooler scenario: fewer
// than the workers, as a pooler is used.
const poolerServerConns = 4

// runPooler is the pooler scenario: the cost scenario's variants through PgBouncer in
// transaction mode, with the delay proxy between the benchmark and PgBouncer, for each pgx
// mode that works there (exec, simple protocol). Business alone goes through the same
// pooler, so each ratio compares like with like.
func runPooler(ctx context.Context, e *env, rep *report) error {
	dir, err := os.MkdirTemp("", "inbox-bench-pgbouncer-")
	if err != nil {
		return err
	}
	e.onClose(func() { os.RemoveAll(dir) })
	bouncer, err := testenv.StartPgBouncer(dir, e.opts.postgres, poolerServerConns)
	if err != nil {
		return err
	}
	e.onClose(bouncer.Stop)
	config, err := pgxpool.ParseConfig(bouncer.URL)
	if err != nil {
		return err
	}
	target := net.JoinHostPort(config.ConnConfig.Host, fmt.Sprint(config.ConnConfig.Port))
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		for _, delay := range e.opts.poolerDelays {
			config := config.Copy()
			config.MaxConns = int32(maxWorkers(e) + 4)
			config.ConnConfig.DefaultQueryExecMode = mode
			pool, err := e.pgPoolVia(ctx, config, target, delay)
			if err != nil {
				return err
			}
			b, err := pgBackend(ctx, e, pool, delay)
			if err == nil {
				b.db = "postgres via PgBouncer, " + mode.String()
				b.scenario = "pooler"
				log.Printf("%s, %s each way: round trip %s", b.db, delay, b.rtt)
				err = b.measure(ctx, e, rep)
			}
			pool.Close()
			if err != nil {
				return fmt.Errorf("%s, %s each way: %w", mode, delay, err)
			}
		}
	}
	return nil
}
