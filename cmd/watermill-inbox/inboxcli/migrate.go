package inboxcli

import (
	"context"
	"fmt"
	"io"
)

func (x *cli) migrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := x.newCommand("migrate")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, err := c.connect(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.store.InitializeSchema(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inbox table %q and its processed_at index are in place (%s) and it can guard against duplicates\n", c.table, d.dialect.Name())
	return nil
}
