package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
)

// recorder is a handlertest.TB that keeps the reports.
type recorder struct{ errors, logs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

type nopStore struct{}

func (nopStore) Claim(context.Context, inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	return nil, nil, errors.New("not a store")
}

// Bad input is refused before anything runs, every problem at once, with no panic, by Run
// and by each scenario alone.
func TestBadInputIsRefusedWithEveryProblem(t *testing.T) {
	for name, run := range map[string]func(handlertest.TB, handlertest.Case){
		"Run": handlertest.Run, "Reference": handlertest.Reference, "Copies": handlertest.Copies,
		"Concurrent": handlertest.Concurrent, "Failures": handlertest.Failures, "External": handlertest.External,
	} {
		r := &recorder{}
		run(r, handlertest.Case{})
		if len(r.errors) != 1 {
			t.Fatalf("%s: %d reports, want 1: %q", name, len(r.errors), r.errors)
		}
		for _, want := range []string{
			"handlertest: Case.Handler is nil", "handlertest: Case.Store is nil", "handlertest: Case.Message is nil",
			"handlertest: Case.Snapshot is nil", "handlertest: Case.Reset is nil",
		} {
			if !strings.Contains(r.errors[0], want) {
				t.Errorf("%s: the report does not say %q:\n%s", name, want, r.errors[0])
			}
		}
	}

	full := handlertest.Case{
		Handler:  func(*message.Message) ([]*message.Message, error) { return nil, nil },
		Store:    nopStore{},
		Config:   inbox.Config{Consumer: "billing"},
		Message:  message.NewMessage("m-1", nil),
		Snapshot: func(context.Context) (any, error) { return 0, nil },
		Reset:    func(context.Context) error { return nil },
	}
	for _, tc := range []struct {
		name   string
		change func(*handlertest.Case)
		want   string
	}{
		{"no UUID", func(c *handlertest.Case) { c.Message = message.NewMessage("", nil) }, "handlertest: Case.Message has no UUID"},
		{"negative copies", func(c *handlertest.Case) { c.Copies = -1 }, "must not be negative"},
		{"one concurrent copy", func(c *handlertest.Case) { c.Concurrent = 1 }, "handlertest: Case.Concurrent is 1"},
		// The kit gives each scenario a consumer of its own, so an empty one is no problem.
		{"no consumer", func(c *handlertest.Case) { c.Config.Consumer = "" }, ""},
	} {
		c := full
		tc.change(&c)
		r := &recorder{}
		handlertest.Run(r, c)
		if tc.want == "" {
			// The Case is valid: the store's error is what stops it.
			if len(r.errors) == 0 || !strings.Contains(r.errors[0], "not a store") {
				t.Errorf("%s: reports %q, want the store's claim error", tc.name, r.errors)
			}
			continue
		}
		if len(r.errors) != 1 || !strings.Contains(r.errors[0], tc.want) {
			t.Errorf("%s: reports %q, want one saying %q", tc.name, r.errors, tc.want)
		}
	}
}

func TestDefaultRetriable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "55P03"}, true},
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("Error 1213 (40001): Deadlock found when trying to get lock"), true},
		{errors.New("Error 1205 (HY000): Lock wait timeout exceeded"), true},
		{errors.New("Error 1062 (23000): Duplicate entry"), false},
		{codeError(517), true}, // SQLITE_BUSY_SNAPSHOT
		{codeError(6), true},   // SQLITE_LOCKED
		{codeError(19), false}, // SQLITE_CONSTRAINT
		{errors.New("database is locked (5) (SQLITE_BUSY)"), true},
		{errors.New("payment provider down"), false},
	} {
		if got := handlertest.DefaultRetriable(tc.err); got != tc.want {
			t.Errorf("DefaultRetriable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// codeError is an error with a Code, as modernc.org/sqlite's are.
type codeError int

func (e codeError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e codeError) Code() int     { return int(e) }

func TestRecorderKeepsWhatItIsGiven(t *testing.T) {
	r := handlertest.NewRecorder()
	m := message.NewMessage("u-1", []byte("p"))
	m.Metadata.Set("k", "v")
	if err := r.Publish("t", m); err != nil {
		t.Fatal(err)
	}
	m.Payload[0] = 'x' // a copy was kept
	got := r.Messages()
	if len(got) != 1 || got[0].Topic != "t" || got[0].UUID != "u-1" || string(got[0].Payload) != "p" || got[0].Metadata["k"] != "v" {
		t.Errorf("Messages() = %+v", got)
	}
}
