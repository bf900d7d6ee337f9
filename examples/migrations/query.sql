-- name: ClaimsPerConsumer :many
SELECT consumer, count(*) AS claims, min(processed_at)::timestamptz AS oldest, max(processed_at)::timestamptz AS newest
FROM app.billing_inbox
GROUP BY consumer
ORDER BY consumer;

-- name: ClaimedAt :one
SELECT processed_at FROM app.billing_inbox WHERE consumer = $1 AND message_id = $2;
