#!/usr/bin/env bash
# docs/RELIABILITY.md (the guarantees): "a row set back to PENDING by hand is found by the safety pass over its partition
# (within about a minute)". Claims start at each lease partition's floor, above the rows
# already published; the safety pass reads one partition in turn from the bottom every
# second (all 64 in 64 s). A SENT row is set back to PENDING by hand, without the
# doorbell's requeue count, on an idle relay whose floors have long passed it: it must be
# published again within 70 s.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
writers 2 100 20
wait_until 60 "rows SENT" all_sent
sleep 3 # the floors move past the published rows
id=$(psqlc "UPDATE outbox SET status = 'PENDING', sent_at = NULL
            WHERE id = (SELECT min(id) FROM outbox) RETURNING id")
set_back=$SECONDS
log "row $id set back to PENDING by hand"
wait_until 90 "row $id published again" rows_are 1 "id = $id AND status = 'SENT'"
took=$((SECONDS - set_back))
log "row $id found and published again after $took s"
[ "$took" -le 70 ] || fail "the row set back by hand was found after $took s (docs/RELIABILITY.md: within 70 s)"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder around a row set back by hand"
[ "$(check_field duplicates)" = 1 ] || fail "the row set back should be in Kafka twice: $(check_field duplicates) duplicates"
log "ok"
