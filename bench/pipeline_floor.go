package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// The hand-written floor of the coalesced store: what the machine allows a request of several
// transactions per connection, written without the library.

// vCoalescedFloor is the floor's name: pipelineConns connections, each sending a request of
// floorMessages messages at a time.
var vCoalescedFloor = fmt.Sprintf("hand-written multi-statement requests, %d in flight", floorMessages*pipelineConns)

// floorMessages is how many messages' transactions one request of the floor carries: the
// coalesced store's PipelineConfig.Messages in the scenario.
const floorMessages = 8

// floorConsumer is the consumer the floor claims as, in the coalesced store's table.
const floorConsumer = "bench-floor"

// coalescedFloor returns the floor as a variant on connector (multiStatements and
// interpolateParams on): each of pipelineConns workers sends, on a connection of its own,
// requests of floorMessages transactions (START TRANSACTION; the claim; the business insert;
// COMMIT), and nothing else: no duplicate check, no statement count, no marker between them.
// Each round counts its claims from another statement. close releases its connections.
func coalescedFloor(ctx context.Context, connector driver.Connector, table, insert string, round time.Duration) (v variant, close func(), err error) {
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(pipelineConns + 1)
	db.SetMaxIdleConns(pipelineConns + 1)
	conns := make([]*sql.Conn, pipelineConns)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			db.Close()
			return variant{}, nil, err
		}
	}
	claim := fmt.Sprintf("INSERT IGNORE INTO %s (consumer, message_id) VALUES (?, ?)", table)
	text := strings.Repeat("START TRANSACTION;"+claim+";"+insert+";COMMIT;", floorMessages)
	text = strings.TrimSuffix(text, ";")
	o := func(ctx context.Context, worker int) error {
		args := make([]any, 0, 5*floorMessages)
		for range floorMessages {
			id := watermill.NewUUID()
			args = append(args, floorConsumer, id, id, customer, amountCents)
		}
		_, err := conns[worker].ExecContext(ctx, text, args...)
		return err
	}
	claims := func(ctx context.Context) (n int64, err error) {
		return n, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE consumer = ?", floorConsumer).Scan(&n)
	}
	v = variant{name: vCoalescedFloor, op: o, run: func(ctx context.Context, _ int) (roundResult, error) {
		before, err := claims(ctx)
		if err != nil {
			return roundResult{}, err
		}
		res, err := runFor(ctx, pipelineConns, round, nil, o)
		if err != nil {
			return res, err
		}
		res.msgs *= floorMessages
		after, err := claims(ctx)
		if err != nil {
			return res, err
		}
		if after-before != res.msgs {
			return res, fmt.Errorf("%d claims committed, want %d", after-before, res.msgs)
		}
		return res, nil
	}}
	return v, func() {
		for _, c := range conns {
			c.Close()
		}
		db.Close()
	}, nil
}
