package handlertest

import "github.com/inboxkit/watermill-inbox/internal/record"

// The middleware records what a handler produced with its claim (inbox.Record.Produced) and
// passes the record to the store's Commit or ClaimAndCommit, where handlertest sees it. The package
// reads the messages published through a Publisher out of it, with the middleware's own reader
// of the record, to tell a [Recorder] that saw nothing from a handler that published nothing.
// TestRecordOfTheMiddlewareIsRead runs the real middleware to keep the two in step.

// publishedIn returns the messages published through a Publisher that record holds; false
// for a record the reader does not know.
func publishedIn(encoded []byte) ([]Produced, bool) {
	r, err := record.Decode(encoded)
	if err != nil {
		return nil, false
	}
	out := make([]Produced, 0, len(r.Published))
	for _, p := range r.Published {
		out = append(out, Produced{Topic: p.Topic, UUID: p.Msg.UUID, Payload: p.Msg.Payload})
	}
	return out, true
}
