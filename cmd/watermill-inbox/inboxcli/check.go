package inboxcli

import (
	"context"
	"fmt"
	"io"
)

// checkCommand reads the table's shape from the catalog: exit 0 if it can guard against
// duplicates, 1 with every reason if it cannot (a missing table among them), for CI
// pipelines and init containers.
func (x *cli) checkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := x.newCommand("check")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.store.CheckTable(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inbox table %q can guard against duplicates (%s)\n", c.table, d.dialect.Name())
	if indexed, err := d.retentionIndex(ctx); err != nil {
		return err
	} else if !indexed {
		fmt.Fprintf(stdout, "warning: %s\n", noRetentionIndex(c.table, d.dialect.Name()))
	}
	return nil
}
