// Package inboxotel names the OpenTelemetry instruments and spans of the inbox middleware
// and of retention, for dashboards, alerts and tests: their names are part of the module's
// compatibility promise. The middleware records them on the providers of
// inbox.Config.MeterProvider and inbox.Config.TracerProvider, retention on
// sqlinbox.CleanupConfig.MeterProvider; docs/operating.md lists them with their attributes.
package inboxotel

// The OpenTelemetry instruments the middleware records, on the meter named ScopeName. Every
// measurement carries the attributes "consumer" and "handler" (the router handler's name,
// "" outside a router); inbox.messages.failed carries "stage" too.
const (
	// ScopeName is the instrumentation scope of the middleware's meter and tracer, and of
	// retention's meter (sqlinbox).
	ScopeName = "github.com/inboxkit/watermill-inbox"

	// MetricProcessed counts messages whose handler ran and whose transaction committed.
	MetricProcessed = "inbox.messages.processed"
	// MetricDuplicates counts messages skipped because their key was already committed.
	MetricDuplicates = "inbox.messages.duplicates"
	// MetricRolledBack counts handler runs that failed or panicked and were rolled back.
	MetricRolledBack = "inbox.messages.rolled_back"
	// MetricFingerprintMismatches counts duplicates whose payload fingerprint differed.
	MetricFingerprintMismatches = "inbox.fingerprint.mismatches"
	// MetricSkipped counts messages acked without a claim because Config.Skip returned
	// true; its "consumer" attribute is "".
	MetricSkipped = "inbox.messages.skipped"
	// MetricFailed counts messages nacked by the inbox itself; "stage" says where: "key"
	// (no key or consumer), "claim" (begin or claim failed), "record" (what the handler
	// produced is larger than the middleware's MaxRecorded), "commit" or "publish" (publishing
	// what a handler published through a Publisher).
	MetricFailed = "inbox.messages.failed"
	// MetricClaimDuration is the time from BEGIN to the claim's answer, in seconds.
	MetricClaimDuration = "inbox.claim.duration"
	// MetricTransactionDuration is the time from BEGIN to the end of COMMIT, in seconds.
	MetricTransactionDuration = "inbox.transaction.duration"
	// MetricRowsDeleted counts inbox rows deleted by retention (sqlinbox's Cleanup), with the
	// attribute "table" instead of consumer and handler.
	MetricRowsDeleted = "inbox.cleanup.rows_deleted"
	// MetricPipelineMessages is a histogram of the requests each pipeline of a store made by
	// sqlinbox's NewPgxPipeline carried (a message's claim, writes and record, or the read
	// of a duplicate's committed claim), or the messages each multi-statement request of a
	// store made by NewMultiStatementCoalesced carried, with the attribute "table": a pipeline of
	// one is a delivery that went alone, and larger ones show deliveries coalescing.
	MetricPipelineMessages = "inbox.pipeline.messages"
	// MetricRelayPublished counts the records a relay (sqlinbox's RelayRunner) published,
	// with the attribute "table".
	MetricRelayPublished = "inbox.relay.records_published"
	// MetricRelayBacklog is a gauge of the unpublished records a relay found after its last
	// pass, with the attribute "table".
	MetricRelayBacklog = "inbox.relay.backlog"
	// MetricRelayOldestAge is a gauge of the age of the oldest unpublished record after a
	// relay's last pass, in seconds (0 when there is none), with the attribute "table".
	MetricRelayOldestAge = "inbox.relay.oldest_age"
)

// The OpenTelemetry spans the middleware starts, from the tracer named ScopeName.
// SpanMessage is a child of the span in the message's context (if any) and the parent of the
// others; it carries the attributes "consumer", "handler", "messaging.message.id",
// "inbox.key" and "inbox.outcome" ("processed", "duplicate", "rolled_back" or "failed").
// A span whose step failed has status Error and the error recorded as an event.
const (
	// SpanMessage covers the whole message in the middleware.
	SpanMessage = "inbox.message"
	// SpanClaim covers BEGIN and the claim (claim-first mode).
	SpanClaim = "inbox.claim"
	// SpanHandler covers the handler; the handler's own spans are its children.
	SpanHandler = "inbox.handler"
	// SpanCommit covers the queued writes, the record of produced messages and COMMIT; in
	// write-behind mode the claim too.
	SpanCommit = "inbox.commit"
	// SpanPublish covers publishing what the handler published through a Publisher.
	SpanPublish = "inbox.publish"
)
