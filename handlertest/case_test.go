package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
)

// keepingT is a testing.TB that keeps what the kit reports instead of failing the test: Run
// calls only Helper, Errorf and Logf.
type keepingT struct {
	testing.TB
	errors, logs []string
}

func (r *keepingT) Helper() {}
func (r *keepingT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *keepingT) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

type nopStore struct{}

func (nopStore) Claim(context.Context, inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	return nil, nil, errors.New("not a store")
}

// Bad input is refused before anything runs, every problem at once, with no panic, by Run
// and by each scenario alone; each problem is reported and returned.
func TestBadInputIsRefusedWithEveryProblem(t *testing.T) {
	for name, run := range map[string]func(context.Context, testing.TB, handlertest.Case, *handlertest.Options) handlertest.Result{
		"Run": handlertest.Run, "Reference": handlertest.Reference, "Copies": handlertest.Copies,
		"Concurrent": handlertest.Concurrent, "Failures": handlertest.Failures, "External": handlertest.External,
	} {
		r := &keepingT{}
		res := run(nil, r, handlertest.Case{}, nil) // a nil context is one of the problems
		want := []string{
			"handlertest: the context is nil", "handlertest: Case.Handler is nil", "handlertest: Case.Store is nil",
			"handlertest: Case.Message is nil", "handlertest: Case.Snapshot is nil", "handlertest: Case.Reset is nil",
		}
		if len(r.errors) != len(want) || len(res.Problems) != len(want) {
			t.Fatalf("%s: %d reports and %d problems, want %d: %q", name, len(r.errors), len(res.Problems), len(want), r.errors)
		}
		for i, want := range want {
			if !strings.HasPrefix(r.errors[i], want) {
				t.Errorf("%s: report %d is %q, want it to start %q", name, i, r.errors[i], want)
			}
			if p := res.Problems[i]; p.Scenario != "" || !strings.HasPrefix(r.errors[i], p.String()) {
				t.Errorf("%s: problem %d is %+v, reported as %q", name, i, p, r.errors[i])
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
		change func(*handlertest.Case, *handlertest.Options)
		want   string
	}{
		{"no UUID", func(c *handlertest.Case, _ *handlertest.Options) { c.Message = message.NewMessage("", nil) }, "handlertest: Case.Message has no UUID"},
		{"negative deadline", func(_ *handlertest.Case, o *handlertest.Options) { o.Deadline = -1 }, "handlertest: Options.Deadline is negative"},
		{"a Recorder without a Publisher", func(_ *handlertest.Case, o *handlertest.Options) { o.Recorder = handlertest.NewRecorder() },
			"handlertest: Options.Recorder is set but Config.Publisher is nil"},
		// The kit gives each scenario a consumer of its own, so an empty one is no problem.
		{"no consumer", func(c *handlertest.Case, _ *handlertest.Options) { c.Config.Consumer = "" }, ""},
	} {
		c, o := full, handlertest.Options{}
		tc.change(&c, &o)
		r := &keepingT{}
		handlertest.Run(t.Context(), r, c, &o)
		if tc.want == "" {
			// The Case is valid: the store's error, at the check before any delivery, stops it.
			if len(r.errors) != 1 || !strings.HasPrefix(r.errors[0], "handlertest: the store's claim failed before any delivery: not a store") {
				t.Errorf("%s: reports %q, want the store's claim error", tc.name, r.errors)
			}
			continue
		}
		if len(r.errors) != 1 || !strings.Contains(r.errors[0], tc.want) {
			t.Errorf("%s: reports %q, want one saying %q", tc.name, r.errors, tc.want)
		}
	}
}

// A Problem reads as the kit reports it.
func TestProblemString(t *testing.T) {
	p := handlertest.Problem{Scenario: "failures", Step: "COMMIT fails", Attempt: "attempt 1", What: "the state is not the state of before it:",
		Details: []string{"Ledger: 1 rows, want 0"}, Cause: "a repository on the pool?"}
	want := "handlertest: failures (COMMIT fails), attempt 1: the state is not the state of before it:\n\tLedger: 1 rows, want 0\n\tprobable cause: a repository on the pool?"
	if got := p.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (handlertest.Problem{What: "Case.Store is nil"}).String(); got != "handlertest: Case.Store is nil" {
		t.Errorf("String() of a problem of the input = %q", got)
	}
}

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
