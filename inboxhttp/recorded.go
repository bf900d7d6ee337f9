package inboxhttp

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/internal/entry"
)

// replayedHeaders are the response headers a record keeps besides [Config.ReplayHeaders]: those
// that describe the representation and where the created resource is, and Vary, which says
// what request headers a cache must match before it serves the response to another request:
// without it, a replayed Cache-Control: public would let a shared cache serve one client's
// response to others. Set-Cookie, Date and the connection's own headers are never replayed
// (neverReplayed).
var replayedHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location", "ETag",
	"Last-Modified", "Cache-Control", "Vary", "Link"}

// recordedResponse is the response as the inbox records it with the claim: a field of the
// claim's record of its own (see package entry), never a message, so that nothing a producer
// of a broker message sets can pose as one.
type recordedResponse struct {
	Status      int                 `json:"status"`
	Header      map[string][]string `json:"header,omitempty"`
	Body        []byte              `json:"body,omitempty"`
	BodyOmitted bool                `json:"body_omitted,omitempty"`
}

// record is the record of served: its status, its replayed headers and its body, unless the
// body is larger than MaxRecordedBody.
func (m *middleware) record(served *buffered) []byte {
	rec := recordedResponse{Status: served.statusCode(), Header: map[string][]string{}, Body: served.body.Bytes()}
	for _, name := range m.replayed {
		if v := served.header.Values(name); len(v) > 0 {
			rec.Header[http.CanonicalHeaderKey(name)] = v
		}
	}
	if int64(len(rec.Body)) > m.config.MaxRecordedBody {
		rec.Body, rec.BodyOmitted = nil, true
	}
	encoded, _ := json.Marshal(rec) // strings, bytes, an int and a bool: no error
	return encoded
}

// replay sends a recorded response.
func replay(w http.ResponseWriter, recorded []byte) {
	var rec recordedResponse
	if err := json.Unmarshal(recorded, &rec); err != nil || rec.Status < 200 {
		rec = recordedResponse{Status: http.StatusOK} // not written by record: nothing of it is sent
	}
	h := w.Header()
	for k, v := range rec.Header {
		h[k] = v
	}
	h.Set(HeaderReplayed, "true")
	if rec.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

// requestFingerprint is the inbox's fingerprint of a request: [Config.Fingerprint]'s, which
// handle computed, or none.
func requestFingerprint(msg *message.Message) []byte {
	if ex := entry.From(msg.Context()); ex != nil {
		return ex.Fingerprint
	}
	return nil
}
