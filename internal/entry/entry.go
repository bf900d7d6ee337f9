// Package entry marks what the inbox middleware records for an entry point other than a
// Watermill router: package inboxhttp records a request's response as a returned message with
// ResponseMetadata set, which only a delivery from inboxhttp may get back, since a router
// would publish it.
package entry

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ResponseMetadata is set on the message that holds a recorded HTTP response.
const ResponseMetadata = "_inbox_http_response"

type httpKey struct{}

// WithHTTP marks ctx as a delivery from inboxhttp.
func WithHTTP(ctx context.Context) context.Context { return context.WithValue(ctx, httpKey{}, true) }

// FromHTTP reports whether ctx comes from WithHTTP.
func FromHTTP(ctx context.Context) bool {
	yes, _ := ctx.Value(httpKey{}).(bool)
	return yes
}

// WithoutResponses returns msgs without the recorded HTTP responses among them.
func WithoutResponses(msgs []*message.Message) []*message.Message {
	out := msgs[:0:0]
	for _, m := range msgs {
		if m.Metadata.Get(ResponseMetadata) == "" {
			out = append(out, m)
		}
	}
	return out
}
