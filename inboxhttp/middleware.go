package inboxhttp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/entry"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The headers of a response the middleware writes itself or replays.
const (
	// HeaderKey is the request header that carries the idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from its record: the handler did
	// not run for this request.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderBodyOmitted is set to "true" on a replay whose original body was larger than
	// [Config.MaxRecordedBody], so that only its status and headers were recorded.
	HeaderBodyOmitted = "Idempotent-Replay-Body-Omitted"
)

// errServerError fails the claim of a request whose handler answered with a server error.
var errServerError = errors.New("inboxhttp: the handler answered with a server error")

// NewMiddleware returns a net/http middleware that makes a handler idempotent by the
// Idempotency-Key header, on store, in the same transaction as the handler's writes: see the
// package documentation. It takes what [inbox.NewMiddleware] takes and gives the same
// guarantees, to a net/http handler instead of a router's. A nil logger logs nothing.
func NewMiddleware(store inbox.Store, config Config, logger watermill.LoggerAdapter) (func(http.Handler) http.Handler, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	// The inbox middleware's own lines (its consumer at construction, a failed rollback) say
	// they are an HTTP endpoint's, which has no router handler to name.
	logger = logger.With(watermill.LogFields{"entry_point": "http"})
	mw, err := inbox.NewMiddleware(store, inbox.Config{
		Consumer:       config.Consumer,
		Fingerprint:    requestFingerprint,
		WriteBehind:    config.WriteBehind,
		Publisher:      config.Publisher,
		MaxRecorded:    config.maxRecorded(),
		MeterProvider:  config.MeterProvider,
		TracerProvider: config.TracerProvider,
	}, logger)
	if err != nil {
		return nil, err
	}
	m := &middleware{config: config, mw: mw, logger: logger, inFlight: newInFlight(),
		replayed: slices.Concat(replayedHeaders, config.ReplayHeaders)}
	return m.wrap, nil
}

type middleware struct {
	config   Config
	mw       message.HandlerMiddleware
	logger   watermill.LoggerAdapter
	inFlight *inFlight // this process's requests whose claims are undecided or open
	replayed []string  // the response headers a record keeps
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	key, err := parseKey(r.Header.Values(HeaderKey))
	switch {
	case errors.Is(err, errNoKey) && !m.config.RequireKey:
		next.ServeHTTP(w, r)
		return
	case errors.Is(err, errNoKey):
		problemMissingKey.write(w, "send a unique key for each operation, the same one again when you retry it: "+
			HeaderKey+`: "<key>"`, 0)
		return
	case err != nil:
		problemBadKey.write(w, err.Error(), 0)
		return
	}
	scope, err := m.config.Scope(r)
	if err != nil {
		problemNoScope.write(w, err.Error(), 0)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.config.MaxRequestBody+1))
	if err != nil {
		problemUnreadable.write(w, "reading the request body: "+err.Error(), 0)
		return
	}
	if int64(len(body)) > m.config.MaxRequestBody {
		problemTooLarge.write(w, fmt.Sprintf("this endpoint reads at most %d bytes", m.config.MaxRequestBody), 0)
		return
	}
	req := request{r: r, key: key, claimKey: ScopedKey(scope, key), body: body}
	f, open, err := m.inFlight.enter(r.Context(), req.claimKey)
	switch {
	case err != nil: // the request ended (its client gone) while a copy's claim was being decided
		problemUnavailable.write(w, "the request ended while another request of its key was being claimed", 0)
		return
	case open:
		problemInFlight.write(w, "retry after the first request has been answered; its answer is then replayed",
			m.config.retryAfterSeconds())
		return
	}
	m.handle(next, w, req, f)
}

// request is an HTTP request with what the middleware read of it.
type request struct {
	r        *http.Request
	key      string // the Idempotency-Key, as the client sent it
	claimKey string // the key the inbox claims: [ScopedKey] of the scope and key
	body     []byte
}

// handle runs the request through the inbox middleware as a message whose UUID is the claim
// key: the claim, the handler with the claim's transaction in the request's context, the
// record of the response and COMMIT; the response goes out after the commit, or is replayed.
// f is the request's flight, nil for a copy that goes to the database as it is.
func (m *middleware) handle(next http.Handler, w http.ResponseWriter, req request, f *flight) {
	leave := func() {}
	if f != nil {
		leave = func() { m.inFlight.leave(req.claimKey, f) }
	}
	defer leave()
	ex := &entry.Exchange{Fingerprint: m.config.Fingerprint(req.r, req.body), OnCommitted: leave}
	msg := message.NewMessage(req.claimKey, req.body)
	msg.SetContext(entry.With(req.r.Context(), ex))

	var served *buffered
	handler := func(msg *message.Message) ([]*message.Message, error) {
		if f != nil && !m.config.WriteBehind {
			// The claim is new and its transaction open; in write-behind mode the handler runs
			// before the claim, which may find the key committed, so copies wait for its end.
			m.inFlight.opened(f)
		}
		served = newBuffered()
		r := req.r.Clone(msg.Context())
		r.Body = io.NopCloser(bytes.NewReader(req.body))
		r.ContentLength = int64(len(req.body))
		next.ServeHTTP(served, r)
		if served.statusCode() >= 500 {
			return nil, errServerError
		}
		ex.Response = m.record(served)
		return nil, nil
	}

	err := m.run(handler, msg)
	switch {
	case ex.Duplicate && ex.Recorded != nil:
		replay(w, ex.Recorded)
	case ex.Duplicate:
		// The key was processed by another entry point of the same consumer (a broker
		// message): its effects are done, and no response of it was recorded.
		w.Header().Set(HeaderReplayed, "true")
		w.WriteHeader(http.StatusNoContent)
	case ex.Committed:
		// The response is the committed one, also when publishing the messages recorded with
		// it failed afterwards: they stay recorded, for a retry or the relay to publish.
		served.send(w, nil)
	case errors.Is(err, errServerError):
		served.send(w, nil) // nothing of it committed: the retry runs the handler again
		return
	default:
		m.fail(w, req, ex, err)
		return
	}
	if err != nil {
		m.logger.Error("Inbox HTTP: the request is committed, but publishing its recorded messages failed", err,
			watermill.LogFields{"consumer": m.config.Consumer, "idempotency_key": req.key})
	}
}

// run calls the inbox middleware, turning a panic of the handler (which the middleware
// rolled back) into an error.
func (m *middleware) run(handler message.HandlerFunc, msg *message.Message) (err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			err = fmt.Errorf("inboxhttp: the handler panicked: %v", recovered)
		}
	}()
	_, err = m.mw(handler)(msg)
	return err
}

// fail answers a request the inbox did not process, or whose commit failed.
func (m *middleware) fail(w http.ResponseWriter, req request, ex *entry.Exchange, err error) {
	var mismatch *inbox.FingerprintMismatchError
	if errors.As(err, &mismatch) {
		problemMismatch.write(w, "the key was first used with a request that differs from this one; use a new key for a new operation", 0)
		return
	}
	transient := !inbox.Poisonous(err) // the infrastructure's, as the inbox middleware marked it
	refusal := refusalOf(err)
	retryAfter := 0
	if transient {
		retryAfter = m.config.retryAfterSeconds()
	}
	p := problemFailed
	switch {
	case refusal != nil: // refused before anything was sent: nothing recorded, whatever the stage
		p = problemUnavailable
		p.Detail = refusal.Error()
	case ex.CommitFailed:
		p = problemCommitUnknown
		if !transient {
			p.Status = http.StatusInternalServerError
		}
	case transient:
		p = problemUnavailable
		p.Detail = "the inbox's database did not take the request (it is away, failing over, or a lock wait or deadlock ended it)"
	}
	m.logger.Error("Inbox HTTP: the request is answered with a server error", err, watermill.LogFields{
		"consumer": m.config.Consumer, "idempotency_key": req.key, "status": p.Status})
	p.write(w, p.Detail, retryAfter)
}

// refusalOf returns the store's refusal of its table or connection within err (the table
// check's message, as the broker path gives it), or nil: the store refuses it before it sends
// anything, and the message names what to fix.
func refusalOf(err error) error {
	for _, sentinel := range []error{sqlinbox.ErrTableMismatch, sqlinbox.ErrMultiStatementRefused} {
		if !errors.Is(err, sentinel) {
			continue
		}
		// The innermost error that wraps the sentinel is the store's own message, without the
		// inbox's prefix of key and consumer.
		for next := errors.Unwrap(err); next != nil && next != sentinel && errors.Is(next, sentinel); next = errors.Unwrap(err) {
			err = next
		}
		return err
	}
	return nil
}

// RequestSHA256 is [Config.Fingerprint]'s default: the SHA-256 of the request's method, path,
// query string (as sent, byte for byte) and body, so that a key sent again with another request
// is refused (422). The query string is in it because a handler reads it as it reads the body:
// POST /orders?coupon=FREE under a used key is another operation, not a retry.
func RequestSHA256(r *http.Request, body []byte) []byte {
	h := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path, r.URL.RawQuery} {
		_, _ = fmt.Fprintf(h, "%d:%s\n", len(part), part)
	}
	h.Write(body)
	return h.Sum(nil)
}

// BodySHA256 is a [Config.Fingerprint] of the body alone: the SHA-256 of its bytes, the same
// fingerprint [inbox.PayloadSHA256] gives a message whose payload is those bytes. Use it on an
// endpoint that shares its consumer with a broker handler, so that a command sent both ways
// under one key is one command rather than a mismatch.
func BodySHA256(_ *http.Request, body []byte) []byte {
	sum := sha256.Sum256(body)
	return sum[:]
}
