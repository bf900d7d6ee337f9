package inboxhttp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/entry"
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

// errServerError fails the claim of a request whose handler answered with a 5xx status.
var errServerError = errors.New("inboxhttp: the handler answered with a server error")

// New returns a net/http middleware that makes a handler idempotent by the Idempotency-Key
// header, on store, in the same transaction as the handler's writes: see the package
// documentation. A nil logger logs nothing.
func New(store inbox.Store, config Config, logger watermill.LoggerAdapter) (func(http.Handler) http.Handler, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
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
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	m := &middleware{config: config, mw: mw, logger: logger, inFlight: map[string]bool{}}
	return m.wrap, nil
}

type middleware struct {
	config Config
	mw     message.HandlerMiddleware
	logger watermill.LoggerAdapter

	mu       sync.Mutex
	inFlight map[string]bool // keys of this process's requests being handled
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	key, err := parseKey(r.Header.Values(HeaderKey))
	switch {
	case errors.Is(err, errNoKey) && !m.config.Required:
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
	body, err := io.ReadAll(io.LimitReader(r.Body, m.config.MaxRequestBody+1))
	if err != nil {
		problemBadKey.write(w, "reading the request body: "+err.Error(), 0)
		return
	}
	if int64(len(body)) > m.config.MaxRequestBody {
		problemTooLarge.write(w, fmt.Sprintf("this endpoint reads at most %d bytes", m.config.MaxRequestBody), 0)
		return
	}
	if !m.enter(key) {
		problemInFlight.write(w, "retry after the first request has been answered; its answer is then replayed", 1)
		return
	}
	defer m.leave(key)
	m.handle(next, w, r, key, body)
}

// enter marks key in flight in this process, unless it is already: a concurrent request
// with the same key then gets 409 at once, without waiting for the first's row lock.
func (m *middleware) enter(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight[key] {
		return false
	}
	m.inFlight[key] = true
	return true
}

func (m *middleware) leave(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inFlight, key)
}

// handle runs the request through the inbox middleware as a message whose UUID is the key:
// the claim, the handler with the claim's transaction in the request's context, the record
// of the response and COMMIT; the response goes out after the commit, or is replayed.
func (m *middleware) handle(next http.Handler, w http.ResponseWriter, r *http.Request, key string, body []byte) {
	ex := &entry.Exchange{Fingerprint: m.config.Fingerprint(r, body)}
	msg := message.NewMessage(key, body)
	msg.SetContext(entry.With(r.Context(), ex))

	var served *buffered
	handler := func(msg *message.Message) ([]*message.Message, error) {
		served = newBuffered()
		req := r.Clone(msg.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		next.ServeHTTP(served, req)
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
		// it failed afterwards: they stay recorded for a redelivery or a relay to publish.
		served.send(w, nil)
	case errors.Is(err, errServerError):
		served.send(w, nil) // nothing of it committed: the retry runs the handler again
		return
	default:
		m.fail(w, err)
		return
	}
	if err != nil {
		m.logger.Error("Inbox HTTP: the request is committed, but publishing its recorded messages failed", err,
			watermill.LogFields{"consumer": m.config.Consumer, "idempotency_key": key})
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

// fail answers a request the inbox did not process.
func (m *middleware) fail(w http.ResponseWriter, err error) {
	var mismatch *inbox.FingerprintMismatchError
	switch {
	case errors.As(err, &mismatch):
		problemMismatch.write(w, "the key was first used with another method, path or body; use a new key for a new operation", 0)
	case errors.Is(err, inbox.ErrInvalidKey):
		problemBadKey.write(w, err.Error(), 0)
	case !inbox.Poisonous(err): // the infrastructure's, as the inbox middleware marked it
		problemUnavailable.write(w, "the database is not available", m.config.RetryAfter)
	default:
		problemFailed.write(w, "", 0)
	}
}

// RequestSHA256 is [Config.Fingerprint]'s default: the SHA-256 of the request's method, path and
// body, so that a key sent again with another request is refused (422).
func RequestSHA256(r *http.Request, body []byte) []byte {
	h := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path} {
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
