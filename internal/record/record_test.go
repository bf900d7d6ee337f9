package record

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// A record comes back byte for byte: UUIDs, topics, metadata and payloads that are not valid
// UTF-8, the response as it was written, and each message in its own list.
func TestARecordComesBackByteForByte(t *testing.T) {
	returned := message.NewMessage("uuid-\xff", []byte{0, 1, 0xfe})
	returned.Metadata.Set("k\xfe", "v\x00")
	published := message.NewMessage("uuid-2", []byte("event"))
	in := Record{
		Returned:  []Message{{Topic: "invoices", Msg: returned}},
		Published: []Message{{Topic: "topic-\xff", Msg: published}},
		Response:  json.RawMessage(`{"status":201,"body":"eA=="}`),
	}
	encoded, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(encoded)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Returned) != 1 || len(out.Published) != 1 {
		t.Fatalf("decoded %d returned and %d published, want 1 and 1", len(out.Returned), len(out.Published))
	}
	for i, pair := range [][2]Message{{in.Returned[0], out.Returned[0]}, {in.Published[0], out.Published[0]}} {
		if pair[0].Topic != pair[1].Topic || !pair[0].Msg.Equals(pair[1].Msg) {
			t.Errorf("message %d: got topic %q %v, want %q %v", i, pair[1].Topic, pair[1].Msg, pair[0].Topic, pair[0].Msg)
		}
	}
	if !bytes.Equal(out.Response, in.Response) {
		t.Errorf("response %s, want %s", out.Response, in.Response)
	}
	if LeastSize(in) > int64(len(encoded)) {
		t.Errorf("LeastSize %d is more than the encoded size %d", LeastSize(in), len(encoded))
	}
}

func TestAnEmptyRecordIsNil(t *testing.T) {
	encoded, err := Encode(Record{})
	if err != nil || encoded != nil {
		t.Fatalf("Encode(Record{}) = %q, %v; want nil, nil", encoded, err)
	}
	if r, err := Decode(nil); err != nil || r.Messages() != 0 || r.Response != nil {
		t.Fatalf("Decode(nil) = %+v, %v; want an empty record", r, err)
	}
}

// Version 3 marked a recorded response by a metadata key a producer could set: it is not read.
func TestAnotherVersionIsRefused(t *testing.T) {
	_, err := Decode([]byte(`{"v":3,"messages":[]}`))
	if err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("Decode of version 3 = %v, want an error naming the version", err)
	}
}

// Pending tells a record with messages from one without, by the encoded bytes alone, for
// every combination Encode writes.
func TestPendingReadsTheEncodedRecord(t *testing.T) {
	msg := func() Message { return Message{Topic: "t", Msg: message.NewMessage("u", []byte("p"))} }
	response := json.RawMessage(`{"status":201}`)
	for _, c := range []struct {
		name string
		in   Record
		want bool
	}{
		{"nothing", Record{}, false},
		{"a response alone", Record{Response: response}, false},
		{"returned", Record{Returned: []Message{msg()}}, true},
		{"published", Record{Published: []Message{msg()}}, true},
		{"published and a response", Record{Published: []Message{msg()}, Response: response}, true},
		{"both lists", Record{Returned: []Message{msg()}, Published: []Message{msg()}}, true},
	} {
		encoded, err := Encode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := Pending(encoded); got != c.want {
			t.Errorf("%s: Pending(%s) = %v, want %v", c.name, encoded, got, c.want)
		}
	}
}
