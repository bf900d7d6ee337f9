package inbox

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/internal/entry"
	"github.com/inboxkit/watermill-inbox/internal/record"
)

// What a handler produced is recorded with its claim, so that a redelivery can publish it
// again. Two kinds of messages are recorded:
//
//   - the messages the handler returns: the router publishes them only after the middleware
//     has committed, and a publish that fails nacks the incoming message, whose redelivery
//     is then a duplicate. The middleware returns the recorded messages for every duplicate,
//     and the router publishes them again;
//   - the messages the handler publishes through a Publisher: the middleware publishes them
//     after the commit, and again for every duplicate.
//
// Either way they keep their original UUIDs, so consumers downstream deduplicate them. The
// stored form is package record's; an HTTP response that package inboxhttp records is a field
// of the record of its own, never a message.

// recordOf is the record of what the handler produced: what it returned (to the router's
// publish topic), what it published, and the response of an entry point other than a router.
func (d *delivery) recordOf(returned []*message.Message, pubs []record.Message) record.Record {
	r := record.Record{Published: pubs}
	topic := message.PublishTopicFromCtx(d.original)
	for _, msg := range returned {
		r.Returned = append(r.Returned, record.Message{Topic: topic, Msg: msg})
	}
	if ex := entry.From(d.original); ex != nil {
		r.Response = ex.Response
	}
	return r
}

// encodeProduced returns nil when there is nothing to record, and an error wrapping
// [ErrRecordTooLarge] for a record of more than limit bytes. A record that is far too large
// (a payload of 100 MB) is refused before it is encoded, by the encoded size of its fields
// alone, so that refusing it allocates nothing of its size; one near the limit is refused
// by its exact size, after encoding.
func encodeProduced(r record.Record, limit int64) ([]byte, error) {
	if least := record.LeastSize(r); least > limit {
		return nil, recordTooLarge(fmt.Sprintf("more than %d bytes", least), r.Messages(), limit)
	}
	encoded, err := record.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if int64(len(encoded)) > limit {
		return nil, recordTooLarge(fmt.Sprintf("%d bytes", len(encoded)), r.Messages(), limit)
	}
	return encoded, nil
}

func recordTooLarge(size string, messages int, limit int64) error {
	return fmt.Errorf("%w: the record of what the handler produced (%d message(s) it returned or published, and a "+
		"response where its entry point records one) is %s, Config.MaxRecorded is %d: "+
		"make the handler produce less (a reference to a large payload stored elsewhere, not the payload) or raise "+
		"MaxRecorded (and, on MySQL, max_allowed_packet), then send the message again", ErrRecordTooLarge, messages, size, limit)
}

// decodeProduced reads a record the middleware stored.
func decodeProduced(encoded []byte) (record.Record, error) {
	r, err := record.Decode(encoded)
	if err != nil {
		return record.Record{}, fmt.Errorf("inbox: %w", err)
	}
	return r, nil
}
