package integration

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy sits between the chaos test's routers and their database and drops
// connections at random. Unlike tcpProxy (which cuts every connection at once, on demand),
// it reads the client's side of the wire protocol frame by frame, so it can cut a connection
// at a chosen point of a transaction:
//
//   - before COMMIT: the COMMIT is swallowed and the connection closed; the server rolls the
//     transaction back, the client's Commit fails;
//   - during COMMIT: the COMMIT is forwarded and the connection closed before the reply; the
//     server commits (or not), the client's Commit fails either way: the ambiguous case;
//   - at a statement: any other frame after the handshake (BEGIN, the claim, the handler's
//     INSERT) is swallowed and the connection closed.
//
// The server-to-client side is copied unchanged.
type faultProxy struct {
	listener net.Listener
	target   string
	// Probabilities per frame: of a COMMIT frame being cut before or during it, of any other
	// frame being cut.
	pBeforeCommit, pDuringCommit, pStatement float64

	armed atomic.Bool // faults are injected only while armed

	cutBeforeCommit, cutDuringCommit, cutAtStatement atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// wireProtocol reads one client frame: its bytes, whether it is a COMMIT, and whether the
// handshake is over (no fault is injected before). endsPipeline says whether the server
// acts on what it has received once it has frame: a COMMIT sent in a pipeline runs only
// when the Sync that ends the pipeline arrives.
type wireProtocol interface {
	next(r *bufio.Reader) (frame []byte, commit, ready bool, err error)
	endsPipeline(frame []byte) bool
}

func startFaultProxy(t *testing.T, target string, newProtocol func() wireProtocol, pBeforeCommit, pDuringCommit, pStatement float64) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{
		listener: ln, target: target,
		pBeforeCommit: pBeforeCommit, pDuringCommit: pDuringCommit, pStatement: pStatement,
		conns: map[net.Conn]struct{}{},
	}
	p.armed.Store(true)
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client, newProtocol())
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *faultProxy) Addr() string { return p.listener.Addr().String() }

func (p *faultProxy) serve(client net.Conn, protocol wireProtocol) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		client.Close()
		server.Close()
		p.mu.Lock()
		delete(p.conns, client)
		delete(p.conns, server)
		p.mu.Unlock()
	}()
	go func() {
		_, _ = io.Copy(client, server)
		client.Close()
		server.Close()
	}()

	r := bufio.NewReaderSize(client, 64<<10)
	cutAfterPipeline := false // a COMMIT in a pipeline was chosen to be cut during
	for {
		frame, commit, ready, err := protocol.next(r)
		if err != nil {
			return
		}
		if cutAfterPipeline && protocol.endsPipeline(frame) {
			if _, err := server.Write(frame); err == nil {
				p.cutDuringCommit.Add(1)
			}
			return
		}
		if ready && p.armed.Load() && !cutAfterPipeline {
			switch {
			case commit && chance(p.pBeforeCommit):
				p.cutBeforeCommit.Add(1)
				return
			case commit && chance(p.pDuringCommit) && protocol.endsPipeline(frame):
				if _, err := server.Write(frame); err == nil {
					p.cutDuringCommit.Add(1)
				}
				return
			case commit && chance(p.pDuringCommit):
				cutAfterPipeline = true // forward up to the Sync, then cut
			case !commit && chance(p.pStatement):
				p.cutAtStatement.Add(1)
				return
			}
		}
		if _, err := server.Write(frame); err != nil {
			return
		}
	}
}

func chance(p float64) bool { return p > 0 && rand.Float64() < p }

// postgresWire is the PostgreSQL frontend protocol: untyped startup packets (SSLRequest,
// GSSENCRequest, StartupMessage), then frames of a type byte and a length. COMMIT is a
// simple Query frame, as pgx's Tx.Commit sends it, or the Bind of a statement whose Parse
// said COMMIT, as in the pipelined batches of the pgx store.
type postgresWire struct {
	started bool
	commits map[string]bool // prepared statement names whose text is COMMIT
}

const maxFrame = 1 << 28

func (w *postgresWire) next(r *bufio.Reader) ([]byte, bool, bool, error) {
	if !w.started {
		var head [4]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, false, false, err
		}
		n := binary.BigEndian.Uint32(head[:])
		if n < 8 || n > maxFrame {
			return nil, false, false, fmt.Errorf("postgres startup packet of %d bytes", n)
		}
		frame := make([]byte, n)
		copy(frame, head[:])
		if _, err := io.ReadFull(r, frame[4:]); err != nil {
			return nil, false, false, err
		}
		switch binary.BigEndian.Uint32(frame[4:8]) {
		case 80877103, 80877104: // SSLRequest, GSSENCRequest: the real startup follows
		default:
			w.started = true
		}
		return frame, false, false, nil
	}
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, false, false, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > maxFrame {
		return nil, false, false, fmt.Errorf("postgres frame %q of %d bytes", head[0], n)
	}
	frame := make([]byte, 1+n)
	copy(frame, head[:])
	if _, err := io.ReadFull(r, frame[5:]); err != nil {
		return nil, false, false, err
	}
	var commit bool
	switch head[0] {
	case 'Q':
		commit = isCommit(string(frame[5:]))
	case 'P': // Parse: statement name, query, ...
		name, rest, _ := strings.Cut(string(frame[5:]), "\x00")
		query, _, _ := strings.Cut(rest, "\x00")
		if w.commits == nil {
			w.commits = map[string]bool{}
		}
		w.commits[name] = isCommit(query)
	case 'B': // Bind: portal name, statement name, ...
		_, rest, _ := strings.Cut(string(frame[5:]), "\x00")
		statement, _, _ := strings.Cut(rest, "\x00")
		commit = w.commits[statement]
	}
	// 'p' (password and SASL messages) belongs to the handshake.
	return frame, commit, head[0] != 'p', nil
}

func (w *postgresWire) endsPipeline(frame []byte) bool { return frame[0] == 'Q' || frame[0] == 'S' }

// mysqlWire is the MySQL client protocol: packets of a 3-byte length and a sequence
// number. The first client packets are the handshake; COMMIT is a COM_QUERY (0x03) packet,
// as go-sql-driver/mysql sends it.
type mysqlWire struct{ packets int }

func (w *mysqlWire) next(r *bufio.Reader) ([]byte, bool, bool, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, false, false, err
	}
	n := int(head[0]) | int(head[1])<<8 | int(head[2])<<16
	frame := make([]byte, 4+n)
	copy(frame, head[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, false, false, err
	}
	w.packets++
	// A command packet starts a new sequence (0); the handshake response and any auth
	// switch replies continue the server's sequence.
	ready := w.packets > 1 && head[3] == 0
	commit := ready && n > 1 && frame[4] == 0x03 && isCommit(string(frame[5:]))
	return frame, commit, ready, nil
}

func (w *mysqlWire) endsPipeline([]byte) bool { return true }

// isCommit reports whether query is COMMIT, or a text of several statements whose last is,
// or whose last is the coalesced store's count of committed messages after a COMMIT.
func isCommit(query string) bool {
	query = strings.Trim(query, "\x00 \t\r\n;")
	if i := strings.LastIndex(query, ";SET @sqlinbox_done = "); i >= 0 && !strings.HasSuffix(query, "= 0") {
		query = query[:i]
	}
	if i := strings.LastIndexByte(query, ';'); i >= 0 {
		query = query[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(query), "commit")
}
