package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

const (
	vRouterNone    = "no dedup"
	vRouterDedup   = "Deduplicator (memory)"
	vRouterInbox   = "inbox"
	dRouterVsDedup = "inbox ÷ Deduplicator (throughput)"
)

// routerRig is a running router with one handler per topic on its own gochannel.
type routerRig struct {
	pubsub *gochannel.GoChannel
	router *message.Router
	topics []string
	cancel context.CancelFunc
	done   chan error
}

func (r *routerRig) close() error {
	err := r.router.Close()
	r.cancel()
	return errors.Join(err, <-r.done, r.pubsub.Close())
}

// startRouter runs a router with k handlers, handler i on topic i, each wrapped by mw (nil:
// none) around h.
func startRouter(ctx context.Context, kind string, k int, mw message.HandlerMiddleware, h message.NoPublishHandlerFunc) (*routerRig, error) {
	logger := watermill.NopLogger{}
	rig := &routerRig{
		pubsub: gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger),
		done:   make(chan error, 1),
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	rig.router = router
	for i := range k {
		topic := fmt.Sprintf("bench_%s_%d", kind, i)
		rig.topics = append(rig.topics, topic)
		handler := router.AddConsumerHandler(fmt.Sprintf("bench_%s_%d", kind, i), topic, rig.pubsub, h)
		if mw != nil {
			handler.AddMiddleware(mw)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rig.cancel = cancel
	go func() { rig.done <- router.Run(runCtx) }()
	select {
	case <-router.Running():
		return rig, nil
	case err := <-rig.done:
		cancel()
		return nil, fmt.Errorf("router stopped: %w", err)
	case <-ctx.Done():
		closeErr := router.Close()
		cancel()
		<-rig.done
		return nil, errors.Join(ctx.Err(), closeErr, rig.pubsub.Close())
	}
}

// publishOp publishes one message to the worker's topic; Publish returns after the ack.
func (r *routerRig) publishOp() op {
	return func(ctx context.Context, worker int) error {
		return r.pubsub.Publish(r.topics[worker], message.NewMessage(watermill.NewUUID(), benchPayload))
	}
}

// runRouter is the router scenario: the same business transaction through a router without dedup,
// with Watermill's in-memory Deduplicator and with this inbox.
func runRouter(ctx context.Context, e *env, rep *report) error {
	b, err := pgBackend(ctx, e, e.pg, 0)
	if err != nil {
		return err
	}
	repo, err := middleware.NewMapExpiringKeyRepository(time.Minute)
	if err != nil {
		return err
	}
	dedup := &middleware.Deduplicator{
		// The default key is an Adler-32 of the payload; every message here has the same
		// payload, and a real consumer deduplicates by message ID.
		KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
		Repository: repo,
	}
	inboxMW, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: benchConsumer}, nil)
	if err != nil {
		return err
	}
	var noneRuns, dedupRuns, inboxRuns atomic.Int64
	own := func(runs *atomic.Int64) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			runs.Add(1)
			return b.business(msg.Context(), msg.UUID)
		}
	}
	inTx := func(msg *message.Message) error {
		inboxRuns.Add(1)
		return b.inTx(msg.Context(), msg.UUID)
	}
	d := e.opts.round
	all := func(n int64) int64 { return n }
	for _, workers := range e.opts.workers {
		log.Printf("router, %d workers (%d topics)", workers, workers)
		var rigs []*routerRig
		closeAll := func() error {
			var errs []error
			for _, r := range rigs {
				errs = append(errs, r.close())
			}
			return errors.Join(errs...)
		}
		for _, spec := range []struct {
			kind string
			mw   message.HandlerMiddleware
			h    message.NoPublishHandlerFunc
		}{
			{"none", nil, own(&noneRuns)},
			{"dedup", dedup.Middleware, own(&dedupRuns)},
			{"inbox", inboxMW, inTx},
		} {
			rig, err := startRouter(ctx, spec.kind, workers, spec.mw, spec.h)
			if err != nil {
				return errors.Join(err, closeAll())
			}
			rigs = append(rigs, rig)
		}
		variants := []variant{
			countedVariant(vRouterNone, d, rigs[0].publishOp(), &noneRuns, all),
			countedVariant(vRouterDedup, d, rigs[1].publishOp(), &dedupRuns, all),
			countedVariant(vRouterInbox, d, rigs[2].publishOp(), &inboxRuns, all),
		}
		results, err := interleave(ctx, workers, e.opts.rounds, d/4, variants)
		if closeErr := closeAll(); err == nil {
			err = closeErr
		}
		if err != nil {
			return err
		}
		at := at{scenario: "router", db: "postgres", workers: workers}
		rep.add(at, []string{vRouterNone, vRouterDedup, vRouterInbox}, results, 0)
		rep.addDerived(at, dRouterVsDedup, ratios(results[2], results[1]))
	}
	return nil
}
