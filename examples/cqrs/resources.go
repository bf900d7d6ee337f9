package main

// What an App creates on RabbitMQ and PostgreSQL, and how to look at it and remove it.

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Queues returns the RabbitMQ queues the App declares, and Exchanges its exchanges.
func (a *App) Queues() []string {
	return []string{
		a.Topics.IssueInvoice + "_" + a.opts.IssueInvoiceHandlerName, a.Topics.SendReceipt + "_" + SendReceiptHandler,
		a.Topics.Events + "_" + ReceiptsHandler, a.Topics.Events + "_" + ShippingHandler,
	}
}

// Exchanges returns the RabbitMQ exchanges the App declares.
func (a *App) Exchanges() []string {
	return []string{a.Topics.IssueInvoice, a.Topics.SendReceipt, a.Topics.Events}
}

// DeleteTopology deletes the App's RabbitMQ queues and exchanges.
func (a *App) DeleteTopology() error {
	conn, err := amqp091.Dial(a.opts.AMQPURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, q := range a.Queues() {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	for _, x := range a.Exchanges() {
		errs = append(errs, ch.ExchangeDelete(x, false, false))
	}
	return errors.Join(errs...)
}

// QueuesEmpty reports whether no queue of the App has a message ready for a consumer.
func (a *App) QueuesEmpty() (bool, error) {
	conn, err := amqp091.Dial(a.opts.AMQPURL)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	for _, q := range a.Queues() {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return false, fmt.Errorf("inspect queue %s: %w", q, err)
		}
		if info.Messages > 0 {
			return false, nil
		}
	}
	return true, nil
}

// DropTables drops the App's tables.
func (a *App) DropTables(ctx context.Context) error {
	var errs []error
	for _, table := range []string{a.Tables.Inbox, a.Tables.Invoices, a.Tables.Receipts, a.Tables.Emails, a.Tables.Shipments} {
		if _, err := a.opts.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Count returns the rows of table, of one order if orderID is not empty.
func (a *App) Count(ctx context.Context, table, orderID string) (n int, err error) {
	query, args := "SELECT COUNT(*) FROM "+table, []any{}
	if orderID != "" {
		query, args = query+" WHERE order_id = $1", append(args, orderID)
	}
	err = a.opts.Pool.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}
