package inboxhttp

import (
	"bytes"
	"net/http"
	"strconv"
)

// buffered is the ResponseWriter the handler writes to: it holds the response until the
// inbox transaction commits, so that nothing reaches the client of a request whose effects
// may still roll back.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBuffered() *buffered { return &buffered{header: http.Header{}} }

func (b *buffered) Header() http.Header { return b.header }

func (b *buffered) WriteHeader(status int) {
	if b.status == 0 && status >= 200 {
		b.status = status
	}
}

func (b *buffered) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// statusCode is the status the handler wrote, 200 if it wrote none.
func (b *buffered) statusCode() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

// send writes the response to w, with extra headers.
func (b *buffered) send(w http.ResponseWriter, extra http.Header) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(b.body.Len()))
	w.WriteHeader(b.statusCode())
	_, _ = w.Write(b.body.Bytes())
}
