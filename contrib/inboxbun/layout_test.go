package inboxbun

import "testing"

// The fields Tx fills must exist in this release, or every Tx call returns ok == false.
func TestLayoutIsKnown(t *testing.T) {
	if errLayout != nil {
		t.Fatal(errLayout)
	}
}
