package handlertest

import "encoding/json"

// The middleware records what a handler produced with its claim (inbox.Record.Produced) and
// passes the record to the store's Commit or ClaimAndCommit, where handlertest sees it. The package
// reads the messages published through a Publisher out of it, to tell a [Recorder] that saw
// nothing from a handler that published nothing. The record's form belongs to the inbox
// package; TestRecordOfTheMiddlewareIsRead runs the real middleware to keep this reader
// in step with it.

// recordVersion is the version of the record this reader knows.
const recordVersion = 3

type record struct {
	Version   int `json:"v"`
	Published []struct {
		Topic   []byte `json:"topic"`
		Message struct {
			UUID    []byte `json:"uuid"`
			Payload []byte `json:"payload"`
		} `json:"message"`
	} `json:"published"`
}

// publishedIn returns the messages published through a Publisher that record holds; false
// for a record this reader does not know.
func publishedIn(encoded []byte) ([]Produced, bool) {
	if len(encoded) == 0 {
		return nil, true
	}
	var r record
	if err := json.Unmarshal(encoded, &r); err != nil || r.Version != recordVersion {
		return nil, false
	}
	out := make([]Produced, 0, len(r.Published))
	for _, p := range r.Published {
		out = append(out, Produced{Topic: string(p.Topic), UUID: string(p.Message.UUID), Payload: p.Message.Payload})
	}
	return out, true
}
