package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	res, err := run(context.Background(), t.TempDir(), 300, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if res.Invoices != res.Orders {
		t.Errorf("%d invoices for %d orders", res.Invoices, res.Orders)
	}
	if res.Duplicates != res.Deliveries-res.Orders {
		t.Errorf("%d duplicates skipped, want deliveries-orders = %d", res.Duplicates, res.Deliveries-res.Orders)
	}
	if res.Duplicates == 0 {
		t.Error("no duplicate was delivered: the run proves nothing")
	}
	for _, row := range []string{"deliveries", "invoices created", "duplicates skipped"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("the table has no %q row:\n%s", row, out.String())
		}
	}
}
