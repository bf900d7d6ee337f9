package main

import (
	"context"
	"log"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

const (
	vProduced0 = "inbox, 0 outputs"
	vProduced1 = "inbox, 1 output"
)

// producedPayload is the output message's payload: 100 bytes.
var producedPayload = message.Payload(`{"invoice":"00000000-0000-0000-0000-000000000000","status":"created","amount_cents":1234,"v":1}.......`)

// runProduced is the produced scenario: the cost of recording one produced message with the claim.
func runProduced(ctx context.Context, e *env, rep *report) error {
	b, err := pgBackend(ctx, e, e.pg, 0)
	if err != nil {
		return err
	}
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: benchConsumer}, nil)
	if err != nil {
		return err
	}
	var runs0, runs1 atomic.Int64
	h0 := mw(func(msg *message.Message) ([]*message.Message, error) {
		runs0.Add(1)
		return nil, b.inTx(msg.Context(), msg.UUID)
	})
	h1 := mw(func(msg *message.Message) ([]*message.Message, error) {
		runs1.Add(1)
		if err := b.inTx(msg.Context(), msg.UUID); err != nil {
			return nil, err
		}
		out := message.NewMessage(watermill.NewUUID(), producedPayload)
		out.Metadata.Set("type", "invoice_created")
		out.Metadata.Set("source", msg.UUID)
		return []*message.Message{out}, nil
	})
	d := e.opts.round
	all := func(n int64) int64 { return n }
	variants := []variant{
		countedVariant(vProduced0, d, handlerOp(h0, freshKey), &runs0, all),
		countedVariant(vProduced1, d, handlerOp(h1, freshKey), &runs1, all),
	}
	for _, workers := range e.opts.workers {
		log.Printf("produced, %d workers", workers)
		results, err := interleave(ctx, workers, e.opts.rounds, d/4, variants)
		if err != nil {
			return err
		}
		at := at{scenario: "produced", db: "postgres", workers: workers}
		rep.add(at, []string{vProduced0, vProduced1}, results, 0)
		var extra []float64
		for i := range min(len(results[0]), len(results[1])) {
			extra = append(extra, (1/results[1][i].rate()-1/results[0][i].rate())*1e6)
		}
		rep.addDerivedUnit(at, "extra wall time per message for 1 output", " µs", extra)
	}
	rep.note("produced", "Extra wall time per message is 1/throughput(1 output) − 1/throughput(0 outputs), per round; at N workers a message's own latency grows by about N times that.")
	return nil
}
