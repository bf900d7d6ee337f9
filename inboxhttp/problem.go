package inboxhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 problem details object, the body of every response the middleware
// writes itself.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// The problems the middleware answers with. Their types are the sections of the repository's
// docs/http.md that explain them.
var (
	problemMissingKey = problem{Type: docsURL + "#missing-key", Status: http.StatusBadRequest,
		Title: "This request needs an Idempotency-Key header"}
	problemBadKey = problem{Type: docsURL + "#malformed-key", Status: http.StatusBadRequest,
		Title: "The Idempotency-Key header is not a valid key"}
	problemInFlight = problem{Type: docsURL + "#in-flight", Status: http.StatusConflict,
		Title: "A request with this Idempotency-Key is still being processed"}
	problemMismatch = problem{Type: docsURL + "#key-reused", Status: http.StatusUnprocessableEntity,
		Title: "This Idempotency-Key was used for another request"}
	problemNoScope = problem{Type: docsURL + "#no-scope", Status: http.StatusForbidden,
		Title: "The endpoint cannot tell whose Idempotency-Key this is"}
	problemUnreadable = problem{Type: docsURL + "#unreadable-body", Status: http.StatusBadRequest,
		Title: "The request body could not be read"}
	problemUnavailable = problem{Type: docsURL + "#unavailable", Status: http.StatusServiceUnavailable,
		Title: "The request could not be processed now and nothing of it was recorded; retry it with the same Idempotency-Key"}
	problemFailed = problem{Type: docsURL + "#failed", Status: http.StatusInternalServerError,
		Title: "The request failed and nothing of it was recorded; retry it with the same Idempotency-Key"}
	problemCommitUnknown = problem{Type: docsURL + "#commit-unknown", Status: http.StatusServiceUnavailable,
		Title:  "The request's commit failed, so whether it was recorded is not known; retry it with the same Idempotency-Key",
		Detail: "the retry gets the recorded response if the commit took effect, and runs the request if it did not"}
	problemTooLarge = problem{Type: docsURL + "#request-too-large", Status: http.StatusRequestEntityTooLarge,
		Title: "The request body is larger than this endpoint reads"}
)

const docsURL = "https://github.com/inboxkit/watermill-inbox/blob/main/docs/http.md"

// write sends p with detail, and a Retry-After of retryAfter seconds when it is above 0.
func (p problem) write(w http.ResponseWriter, detail string, retryAfter int) {
	p.Detail = detail
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a problem body is JSON, not HTML
	_ = enc.Encode(p)        // strings and an int: no error
	body := buf.Bytes()
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
