package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The marks scenario: what the unpublished marks cost a handler that publishes an event
// through an inbox.Publisher, in write-behind mode on NewPgx, at -pipeline-delays: the same
// handler on a table with the column unpublished (the record's statement sets the mark, a
// batch UPDATE on the pool clears it) and on a table made without it (no marks), and the
// business transaction alone, statement by statement, as every scenario has it.
const (
	vMarksOn    = "write-behind + Publisher, marks"
	vMarksOff   = "write-behind + Publisher, no marks (table without the column)"
	vMarksFloor = "business alone"
)

// oldTableDDL is the inbox table as releases before the column unpublished made it.
const oldTableDDL = `CREATE TABLE %s (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	PRIMARY KEY (consumer, message_id)
)`

// discardPublisher is a broker that takes every message at once: the figures are the
// database's.
type discardPublisher struct{ published atomic.Int64 }

func (p *discardPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.published.Add(int64(len(msgs)))
	return nil
}

func (p *discardPublisher) Close() error { return nil }

// runMarks is the marks scenario at each -pipeline-delays setting.
func runMarks(ctx context.Context, e *env, rep *report) error {
	for _, delay := range e.opts.pipelineDelays {
		pool, err := e.pgPool(ctx, delay)
		if err != nil {
			return err
		}
		b, err := pgBackend(ctx, e, pool, delay)
		if err != nil {
			return err
		}
		log.Printf("marks: postgres, %s each way: round trip %s", delay, b.rtt)
		oldTable := e.table("postgres", "bench_old_inbox")
		if _, err := pool.Exec(ctx, fmt.Sprintf(oldTableDDL, oldTable)); err != nil {
			return err
		}
		unmarked, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: oldTable})
		if err != nil {
			return err
		}
		marked, ok := b.store.(*sqlinbox.Store)
		if !ok {
			return fmt.Errorf("marks: store %T", b.store)
		}
		broker := &discardPublisher{}
		d := e.opts.round
		all := func(n int64) int64 { return n }
		variants := []variant{}
		for _, v := range []struct {
			name  string
			store *sqlinbox.Store
		}{{vMarksOn, marked}, {vMarksOff, unmarked}} {
			if err := v.store.CheckTable(ctx); err != nil {
				return err
			}
			publisher, err := inbox.NewPublisher(broker) // one per store: it records with its claims
			if err != nil {
				return err
			}
			mw, err := inbox.NewMiddleware(v.store, inbox.Config{Consumer: benchConsumer, WriteBehind: true, Publisher: publisher}, nil)
			if err != nil {
				return err
			}
			runs := &atomic.Int64{}
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				if err := inbox.ExecAtCommit(msg.Context(), b.insert, msg.UUID, customer, amountCents); err != nil {
					return nil, err
				}
				event := message.NewMessage(watermill.NewUUID(), producedPayload)
				event.SetContext(msg.Context())
				return nil, publisher.Publish("invoices", event)
			})
			variants = append(variants, countedVariant(v.name, d, handlerOp(h, freshKey), runs, all))
		}
		floorRuns := &atomic.Int64{}
		variants = append(variants, countedVariant(vMarksFloor, d, func(ctx context.Context, _ int) error {
			floorRuns.Add(1)
			return b.business(ctx, watermill.NewUUID())
		}, floorRuns, all))
		names := []string{vMarksOff, vMarksOn, vMarksFloor}
		ordered := []variant{variants[1], variants[0], variants[2]}
		for _, workers := range e.opts.workers {
			log.Printf("marks: %s each way, %d workers", delay, workers)
			results, err := interleave(ctx, workers, e.opts.rounds, d/4, ordered)
			if err != nil {
				return err
			}
			rep.add(at{scenario: "marks", db: "postgres", delay: delay, rtt: b.rtt, workers: workers}, names, results, 0)
		}
		if err := marked.FlushMarks(ctx); err != nil {
			return err
		}
		backlog, err := marked.Backlog(ctx)
		if err != nil {
			return err
		}
		if backlog.Records != 0 {
			return fmt.Errorf("marks: %d records left unpublished after every publish succeeded", backlog.Records)
		}
	}
	rep.note("marks", "Ratios are to the same handler on a table without the column unpublished (no marks). With marks, the write-behind claim carries the record and sets the mark in its INSERT (on the table without the column the record is an UPDATE after the INSERT, in the same request), and one UPDATE on the pool clears the marks of up to 500 messages, 20 ms after the first. Business alone sends BEGIN, INSERT and COMMIT one at a time (3 round trips), as in every scenario; every handler's runs are counted each round, and the marked table's backlog is 0 at the end.")
	return nil
}
