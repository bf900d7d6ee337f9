package main

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// writes counts the requests written to database sockets (PostgreSQL and MySQL). Both
// drivers send a request, and pgx a whole pipelined batch, with one write and then wait for
// the answer, so writes per message are round trips per message. A connection's setup is not
// counted: its startup and authentication, pgx preparing a text on it (once per text and
// connection) and its termination. A round that opens a connection, which a loaded machine's
// warm-up can leave to the round, would otherwise count them as the messages' round trips.
// Variants run one at a time, so one counter serves them all.
var writes atomic.Int64

func countingDial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, pgSetup}, nil
}

type countingConn struct {
	net.Conn
	setup func(p []byte) bool
}

func (c countingConn) Write(p []byte) (int, error) {
	if !c.setup(p) {
		writes.Add(1)
	}
	return c.Conn.Write(p)
}

func init() {
	mysql.RegisterDialContext("tcp", func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, mysqlSetup}, nil
	})
}

// pgSetup reports whether p, one write to a PostgreSQL socket, sets its connection up or
// ends it rather than sending a request: the startup message (and the SSL and cancel
// requests), which has no type byte; authentication ('p'); a preparation, Parse and Describe
// with no Bind or Execute; the termination ('X').
func pgSetup(p []byte) bool {
	if len(p) == 0 || p[0] == 0 {
		return true
	}
	request := false
	for len(p) >= 5 {
		switch p[0] {
		case 'p', 'X':
			return true
		case 'B', 'E', 'Q', 'F':
			request = true
		}
		n := int(binary.BigEndian.Uint32(p[1:5]))
		if n < 4 || n+1 > len(p) {
			break
		}
		p = p[n+1:]
	}
	return !request
}

// mysqlSetup reports whether p, one write to a MySQL socket, is the handshake (packets after
// the first of an exchange: a command is sequence 0) or COM_QUIT.
func mysqlSetup(p []byte) bool {
	const comQuit = 0x01
	return len(p) < 5 || p[3] != 0 || p[4] == comQuit
}
