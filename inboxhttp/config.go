package inboxhttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Defaults of [Config].
const (
	DefaultMaxRequestBody  = 1 << 20 // 1 MiB
	DefaultMaxRecordedBody = 1 << 20 // 1 MiB
	// DefaultRetryAfter is the default of [Config.RetryAfter].
	DefaultRetryAfter = time.Second
)

// Config configures [NewMiddleware]. Consumer and Scope are required; every other field has a
// default.
type Config struct {
	// Consumer names the inbox partition, as [inbox.Config.Consumer]: a key is processed once
	// per consumer and scope. The same name on an HTTP endpoint and on a broker handler makes
	// a command sent both ways under one key one command, processed once (the broker handler's
	// key is then [ScopedKey] of the scope and the message's UUID); different names keep them
	// apart. Required.
	Consumer string

	// Scope returns whose key the request's Idempotency-Key is: the authenticated principal
	// (the API key's account, the token's subject), the tenant, or the host where tenancy is
	// by host. A key is claimed under its scope ([ScopedKey]), so requests of two scopes
	// never share a claim: neither is replayed the other's response nor refused because of
	// it, whatever their keys and fingerprints. The scope is compared byte for byte: return
	// the same string for every request of one client (a host lowercased, without its port).
	//
	// Required: [NewMiddleware] refuses a Config without it. Set it to [Unscoped] for an
	// endpoint whose every client is one party (one internal service, a single-tenant
	// deployment), where one key space for all requests is what is wanted.
	//
	// An error is answered 403 with a problem body whose detail is the error's text, before
	// any claim, and the handler does not run: return one for a request whose client the
	// endpoint cannot tell (no credentials).
	Scope func(r *http.Request) (string, error)

	// RequireKey makes a request without an Idempotency-Key a 400 with a problem body, as the
	// draft has it for a resource that requires the key. Default false: such a request is
	// served by the handler as it is, outside the inbox.
	RequireKey bool

	// Fingerprint returns what identifies the request apart from its key; a key sent again
	// with another fingerprint is a 422. Default: [RequestSHA256] (method, path, query string
	// and body). [BodySHA256] fingerprints as a broker handler's default does, for an endpoint
	// whose consumer a broker handler shares. Return nil to compare nothing.
	Fingerprint func(r *http.Request, body []byte) []byte

	// MaxRequestBody is the most bytes of a request body the middleware reads, into memory, to
	// fingerprint it and hand it to the handler; a larger body is a 413, before any claim.
	// Default: [DefaultMaxRequestBody] (1 MiB).
	MaxRequestBody int64

	// MaxRecordedBody is the largest response body recorded with the claim. A larger one is
	// sent to its client in full, after the commit, but recorded without its body: a replay
	// has its status and headers, no body, and [HeaderBodyOmitted]. Default:
	// [DefaultMaxRecordedBody] (1 MiB). The inbox middleware's bound on a record
	// ([inbox.Config.MaxRecorded]) is set to hold such a body with its headers: at least
	// [inbox.DefaultMaxRecorded], more for a MaxRecordedBody above about 3 MiB.
	MaxRecordedBody int64

	// ReplayHeaders are response headers of the handler's own that a record keeps and a
	// replay sends, besides Content-Type, Content-Language, Content-Location, Location,
	// ETag, Last-Modified, Cache-Control, Vary and Link. Set-Cookie and Date are never
	// replayed, nor the connection's own headers: [NewMiddleware] refuses a list that names
	// one (a session cookie replayed would hand one client's session to every retry).
	ReplayHeaders []string

	// RetryAfter is the Retry-After of a 503 for a database that is not available (an error
	// [inbox.Poisonous] reports false for) and of a 409 for a key whose first request is in
	// flight, sent in whole seconds, rounded up. Default: [DefaultRetryAfter] (1 s).
	RetryAfter time.Duration

	// WriteBehind, Publisher, MeterProvider and TracerProvider are [inbox.Config]'s. The
	// messages a handler publishes through Publisher (an [inbox.Publisher]; the handler sets
	// each message's context to the request's) are recorded with the claim and published
	// after the commit.
	WriteBehind    bool
	Publisher      *inbox.Publisher
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Unscoped is a [Config.Scope] that puts every request in one scope: any client's key is
// every client's, and a client that sends another's key gets the other's recorded response.
// Use it only where every client is one party.
func Unscoped(*http.Request) (string, error) { return "", nil }

func (c *Config) setDefaults() {
	if c.Fingerprint == nil {
		c.Fingerprint = RequestSHA256
	}
	if c.MaxRequestBody == 0 {
		c.MaxRequestBody = DefaultMaxRequestBody
	}
	if c.MaxRecordedBody == 0 {
		c.MaxRecordedBody = DefaultMaxRecordedBody
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
}

// recordedHeaders is room in a record for the response's status and replayed headers.
const recordedHeaders = 256 << 10

// maxRecorded is the inbox middleware's MaxRecorded: enough for a body of MaxRecordedBody
// bytes, base64-encoded in the record, and its headers.
func (c Config) maxRecorded() int64 {
	return max(inbox.DefaultMaxRecorded, (c.MaxRecordedBody+2)/3*4+recordedHeaders)
}

// neverReplayed are the response headers a replay never sends from its record: Set-Cookie
// would hand the first client's session to whoever retries, Date is the replay's own, and
// the rest describe the connection or the framing of this response, not the resource.
var neverReplayed = []string{"Set-Cookie", "Date", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "Te", "Trailer", "Upgrade", HeaderReplayed, HeaderBodyOmitted}

func (c Config) validate() error {
	if c.Consumer == "" {
		return errors.New("inboxhttp: Config.Consumer is required: name the service whose effects the endpoint writes")
	}
	if c.Scope == nil {
		return errors.New("inboxhttp: Config.Scope is required: return who sent the request (the authenticated principal, " +
			"the tenant), so that two clients' keys never share a claim; inboxhttp.Unscoped for an endpoint whose clients are one party")
	}
	if c.MaxRequestBody < 0 || c.MaxRecordedBody < 0 || c.RetryAfter < 0 {
		return errors.New("inboxhttp: negative MaxRequestBody, MaxRecordedBody or RetryAfter")
	}
	for _, name := range c.ReplayHeaders {
		for _, never := range neverReplayed {
			if http.CanonicalHeaderKey(name) == http.CanonicalHeaderKey(never) {
				return fmt.Errorf("inboxhttp: Config.ReplayHeaders names %s, which is never replayed", never)
			}
		}
	}
	return nil
}

// retryAfterSeconds is RetryAfter in whole seconds, rounded up: Retry-After counts seconds.
func (c Config) retryAfterSeconds() int {
	return int((c.RetryAfter + time.Second - 1) / time.Second)
}
