package inboxhttp

import (
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Defaults of [Config].
const (
	DefaultMaxRequestBody  = 1 << 20 // 1 MiB
	DefaultMaxRecordedBody = 1 << 20 // 1 MiB
	DefaultRetryAfter      = 1       // second
)

// Config configures [New]. Consumer is required; every other field has a default.
type Config struct {
	// Consumer names the inbox partition, as [inbox.Config.Consumer]: a key is processed once
	// per consumer. The same name on an HTTP endpoint and on a broker handler makes a command
	// sent both ways with the same key (as the message's UUID) one command, processed once;
	// different names keep them apart. Required.
	Consumer string

	// Required makes a request without an Idempotency-Key a 400 with a problem body, as the
	// draft has it for a resource that requires the key. Default false: such a request is
	// served by the handler as it is, outside the inbox.
	Required bool

	// Fingerprint returns what identifies the request apart from its key; a key sent again
	// with another fingerprint is a 422. Default: [RequestSHA256] (method, path and body).
	// [BodySHA256] fingerprints as a broker handler's default does, for an endpoint whose
	// consumer a broker handler shares. Return nil to compare nothing.
	Fingerprint func(r *http.Request, body []byte) []byte

	// MaxRequestBody is the most bytes of a request body the middleware reads, into memory, to
	// fingerprint it and hand it to the handler; a larger body is a 413. Default:
	// [DefaultMaxRequestBody] (1 MiB).
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
	// ETag, Last-Modified, Cache-Control and Link. Date and Set-Cookie are never replayed.
	ReplayHeaders []string

	// RetryAfter is the Retry-After, in seconds, of a 503 for a database that is not
	// available (an error [inbox.Poisonous] reports false for). Default: [DefaultRetryAfter] (1).
	RetryAfter int

	// WriteBehind, Publisher, MeterProvider and TracerProvider are [inbox.Config]'s.
	WriteBehind    bool
	Publisher      *inbox.Publisher
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

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

func (c Config) validate() error {
	if c.Consumer == "" {
		return errors.New("inboxhttp: Config.Consumer is required: name the service whose effects the endpoint writes")
	}
	if c.MaxRequestBody < 0 || c.MaxRecordedBody < 0 || c.RetryAfter < 0 {
		return errors.New("inboxhttp: negative MaxRequestBody, MaxRecordedBody or RetryAfter")
	}
	return nil
}
