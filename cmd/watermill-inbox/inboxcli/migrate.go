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
	// CREATE ... IF NOT EXISTS leaves a table it finds as it is, without the index if it had
	// none (MySQL's index is part of CREATE TABLE), and a name that is another relation's
	// is skipped: say "in place" only after looking.
	if indexed, err := d.retentionIndex(ctx); err != nil {
		return err
	} else if !indexed {
		return fmt.Errorf("%s", noRetentionIndex(c.table, d.dialect.Name()))
	}
	fmt.Fprintf(stdout, "inbox table %q and its processed_at index are in place (%s) and it can guard against duplicates\n", c.table, d.dialect.Name())
	return nil
}
