package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// errDatabaseDown stands for an error a store reports as the infrastructure's.
var errDatabaseDown = errors.New("connection refused")

// classifyingStore is a fakeStore that reports errDatabaseDown (wherever it is wrapped) as
// a failure of the infrastructure, as sqlinbox.Store.IsTransient does for its errors.
type classifyingStore struct{ *fakeStore }

func (classifyingStore) IsTransient(err error) bool { return errors.Is(err, errDatabaseDown) }

type typedDown struct{ addr string }

func (e *typedDown) Error() string { return "dial " + e.addr + ": refused" }
func (e *typedDown) Unwrap() error { return errDatabaseDown }

func TestPoisonous(t *testing.T) {
	permanent := errors.New("malformed payload")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"an error", permanent, true},
		{"a wrapped error", fmt.Errorf("handler: %w", permanent), true},
		{"ErrInvalidKey", fmt.Errorf("%w: empty", inbox.ErrInvalidKey), true},
		{"a fingerprint mismatch", &inbox.FingerprintMismatchError{}, true},
		{"a cancelled delivery", context.Canceled, false},
		{"a wrapped cancellation", fmt.Errorf("publish: %w", context.Canceled), false},
		{"a deadline", context.DeadlineExceeded, true}, // the middleware marks it if its store reports it
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inbox.Poisonous(tt.err); got != tt.want {
				t.Errorf("Poisonous(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestMiddlewareMarksWhatItsStoreReports runs each failure through the middleware on a store
// that reports errDatabaseDown as the infrastructure's: only those come out not poisonous,
// and errors.Is and errors.As still find what the mark wraps.
func TestMiddlewareMarksWhatItsStoreReports(t *testing.T) {
	permanent := errors.New("payload refused")
	tests := []struct {
		name      string
		claimErr  error
		commitErr error
		rbErr     error
		handler   error
		poisonous bool
	}{
		{name: "the claim fails", claimErr: fmt.Errorf("begin: %w", errDatabaseDown)},
		{name: "the commit fails", commitErr: &typedDown{"db:5432"}},
		{name: "a handler's statement on the inbox transaction", handler: fmt.Errorf("insert invoice: %w", errDatabaseDown)},
		{name: "a handler's permanent error", handler: permanent, poisonous: true},
		{name: "a handler's permanent error, its rollback failing", handler: permanent, rbErr: errDatabaseDown},
		{name: "a store error the store does not report", commitErr: permanent, poisonous: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := classifyingStore{newFakeStore()}
			store.claimErr, store.commitErr, store.rbErr = tt.claimErr, tt.commitErr, tt.rbErr
			handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
				return nil, tt.handler
			})
			_, err := handler(message.NewMessage("order-1", nil))
			if err == nil {
				t.Fatal("the delivery succeeded, want an error")
			}
			if got := inbox.Poisonous(err); got != tt.poisonous {
				t.Errorf("Poisonous(%v) = %v, want %v", err, got, tt.poisonous)
			}
			for _, want := range []error{tt.claimErr, tt.commitErr, tt.rbErr, tt.handler} {
				if want != nil && !errors.Is(err, want) {
					t.Errorf("errors.Is(%v, %v) = false: the mark hides what it wraps", err, want)
				}
			}
			var typed *typedDown
			if tt.commitErr != nil && errors.As(tt.commitErr, &typed) && !errors.As(err, &typed) {
				t.Errorf("errors.As(%v, *typedDown) = false: the mark hides what it wraps", err)
			}
		})
	}
}

// TestStoreWithoutClassifierMarksNothing: a store that cannot tell marks nothing, so every
// failure goes to the poison queue, as with Watermill's PoisonQueue.
func TestStoreWithoutClassifierMarksNothing(t *testing.T) {
	store := newFakeStore()
	store.claimErr = errDatabaseDown
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); !inbox.Poisonous(err) {
		t.Errorf("Poisonous(%v) = false on a store without IsTransient, want true", err)
	}
}
