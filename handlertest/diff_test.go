package handlertest

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

type invoice struct {
	OrderID string
	Cents   int64
}

type books struct {
	Invoices []invoice
	Balances map[string]int
	Audit    *int
	note     string // unexported: read through reflect, never through Interface
	At       time.Time
}

func TestDifferencesNamePaths(t *testing.T) {
	one, two := 1, 2
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := books{Invoices: []invoice{{"o-1", 100}}, Balances: map[string]int{"a": 1, "b": 2}, Audit: &one, note: "x", At: at}
	for _, tc := range []struct {
		name string
		got  any
		want any
		diff []string
	}{
		{"equal", want, want, nil},
		{"a row more", books{Invoices: []invoice{{"o-1", 100}, {"o-1", 100}}, Balances: want.Balances, Audit: &one, note: "x", At: at}, want,
			[]string{"Invoices: 2 rows, want 1 (extra: {OrderID:o-1 Cents:100})"}},
		{"a row less", books{Balances: want.Balances, Audit: &one, note: "x", At: at}, want,
			[]string{"Invoices: 0 rows, want 1 (missing: {OrderID:o-1 Cents:100})"}},
		{"a field of a row", books{Invoices: []invoice{{"o-1", 150}}, Balances: want.Balances, Audit: &one, note: "x", At: at}, want,
			[]string{"Invoices[0].Cents: 150, want 100"}},
		{"map values and keys", books{Invoices: want.Invoices, Balances: map[string]int{"a": 3, "c": 1}, Audit: &one, note: "x", At: at}, want,
			[]string{`Balances["a"]: 3, want 1`, `Balances["b"]: none, want 2`, `Balances["c"]: 1, want none`}},
		{"through a pointer, an unexported field and a time", books{Invoices: want.Invoices, Balances: want.Balances, Audit: &two, note: "y", At: at.Add(time.Second)}, want,
			[]string{"Audit: 2, want 1", `note: "y", want "x"`, "At: 2026-01-02 03:04:06 +0000 UTC, want 2026-01-02 03:04:05 +0000 UTC"}},
		{"nil against empty", []invoice{}, []invoice(nil), []string{"snapshot: empty, want nil"}},
		{"a plain value", 2, 1, []string{"snapshot: 2, want 1"}},
		{"other types", int64(1), 1, []string{"snapshot: 1 (int64), want 1 (int)"}},
	} {
		got := differences(tc.got, tc.want)
		if !slices.Equal(got, tc.diff) {
			t.Errorf("%s: differences = %q, want %q", tc.name, got, tc.diff)
		}
		if (got == nil) != reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: differences and reflect.DeepEqual disagree", tc.name)
		}
	}
}

func TestDifferencesAreBounded(t *testing.T) {
	got, want := make([]int, 20), make([]int, 20)
	for i := range got {
		got[i] = i + 1
	}
	diff := differences(got, want)
	if len(diff) != maxDifferences+1 || diff[maxDifferences] != "(and 8 more)" {
		t.Errorf("differences = %q, want %d lines and the count of the rest", diff, maxDifferences)
	}
}
