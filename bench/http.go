package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
)

const (
	vHTTPAlone       = "endpoint alone, no inbox"
	vHTTPTx          = "inboxhttp, TxFromContext"
	vHTTPWriteBehind = "inboxhttp, WriteBehind"
)

// runHTTP is the http scenario: an endpoint that creates an invoice (BEGIN; INSERT; COMMIT),
// called by HTTP clients on loopback with a new Idempotency-Key each, alone and behind
// inboxhttp in both modes, on PostgreSQL at each round-trip time.
func runHTTP(ctx context.Context, e *env, rep *report) error {
	for _, delay := range e.opts.delays {
		pool, err := e.pgPool(ctx, delay)
		if err != nil {
			return err
		}
		b, err := pgBackend(ctx, e, pool, delay)
		if err == nil {
			b.scenario = "http"
			log.Printf("http: postgres, %s each way: round trip %s", delay, b.rtt)
			err = measureHTTP(ctx, e, rep, b)
		}
		pool.Close()
		if err != nil {
			return fmt.Errorf("http: postgres, %s each way: %w", delay, err)
		}
	}
	return nil
}

func measureHTTP(ctx context.Context, e *env, rep *report, b *backend) error {
	alone := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.business(r.Context(), r.Header.Get("X-Invoice")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	inTx := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.inTx(r.Context(), r.Header.Get("X-Invoice")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	deferred := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := inbox.ExecAtCommit(r.Context(), b.insert, r.Header.Get("X-Invoice"), customer, amountCents); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	claimFirst, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: benchConsumer, Scope: inboxhttp.Unscoped, RequireKey: true}, nil)
	if err != nil {
		return err
	}
	writeBehind, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: benchConsumer, Scope: inboxhttp.Unscoped, RequireKey: true, WriteBehind: true}, nil)
	if err != nil {
		return err
	}
	servers := []*httptest.Server{httptest.NewServer(alone), httptest.NewServer(claimFirst(inTx)), httptest.NewServer(writeBehind(deferred))}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	names := []string{vHTTPAlone, vHTTPTx, vHTTPWriteBehind}
	d := e.opts.round
	for _, workers := range e.opts.workers {
		log.Printf("http: %s each way, %d workers", b.delay, workers)
		var variants []variant
		for i, s := range servers {
			variants = append(variants, timedVariant(names[i], d, postOp(s)))
		}
		results, err := interleave(ctx, workers, e.opts.rounds, d/4, variants)
		if err != nil {
			return err
		}
		rep.add(at{scenario: "http", db: "postgres", delay: b.delay, rtt: b.rtt, workers: workers}, names, results, 0)
	}
	return nil
}

// postOp sends one request with a new key and invoice to s, and fails on anything but 201.
func postOp(s *httptest.Server) op {
	client := s.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return func(ctx context.Context, _ int) error {
		id := watermill.NewUUID()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/invoices", bytes.NewReader(benchPayload))
		if err != nil {
			return err
		}
		req.Header.Set(inboxhttp.HeaderKey, `"`+id+`"`)
		req.Header.Set("X-Invoice", id)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		return nil
	}
}
