package inboxtest

import (
	"testing"
)

// Options.Cases runs the cases it names and no other, whatever their order in the suite.
// Each case skips at once here: the harness is asked for, which is what is counted.
func TestRunRunsOnlyTheNamedCases(t *testing.T) {
	for _, named := range [][]string{
		{cases[0].name},
		{cases[3].name, cases[1].name},
		{cases[len(cases)-1].name},
	} {
		var ran []string
		t.Run("", func(t *testing.T) {
			Run(t, func(t *testing.T) *Harness {
				ran = append(ran, t.Name())
				t.SkipNow()
				return nil
			}, &Options{Cases: named})
		})
		if len(ran) != len(named) {
			t.Errorf("Cases %q ran %d cases: %q", named, len(ran), ran)
		}
	}
}
