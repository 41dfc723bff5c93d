-- 004: the writers' function. Online: a new function, nothing else changes.
-- @layout native (the Debezium layout reaches version 6 by schema/debezium/006_layout.sql)
--   <schema>.<table>_enqueue(aggregate_type, aggregate_id, event_type, payload,
--                            headers, event_id, topic, traceparent, tracestate) -> id
-- inserts one event and returns its id. event_id is the idempotency key: a writer that
-- retries its own business transaction with the same event_id gets the existing row's id
-- back instead of a unique violation — while that row exists (until retention deletes it,
-- or at once in OUTBOX_ON_SENT=delete mode once it is published). A duplicate that the
-- caller's snapshot cannot see (REPEATABLE READ, SERIALIZABLE) fails with SQLSTATE 40001,
-- like any serialization failure: the caller retries. traceparent and
-- tracestate (W3C trace context) become headers of the Kafka message.
-- It runs as its owner with a pinned search_path, so a writer needs EXECUTE on it and
-- nothing else (deploy/roles.sql grants it); PUBLIC cannot call it. Its payload has the
-- table's payload type (jsonb, json, text or bytea: OUTBOX_PAYLOAD_TYPE).
CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_enqueue"(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        @PAYLOAD_TYPE@,
    headers        jsonb DEFAULT NULL,
    event_id       uuid  DEFAULT NULL,
    topic          text  DEFAULT NULL,
    traceparent    text  DEFAULT NULL,
    tracestate     text  DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    h   jsonb := "@NAME@_enqueue".headers;
    eid uuid  := coalesce("@NAME@_enqueue".event_id, gen_random_uuid());
    new_id bigint;
BEGIN
    IF "@NAME@_enqueue".traceparent IS NOT NULL THEN
        h := coalesce(h, '{}'::jsonb) || jsonb_build_object('traceparent', "@NAME@_enqueue".traceparent);
    END IF;
    IF "@NAME@_enqueue".tracestate IS NOT NULL THEN
        h := coalesce(h, '{}'::jsonb) || jsonb_build_object('tracestate', "@NAME@_enqueue".tracestate);
    END IF;
    INSERT INTO @TABLE@ AS o (event_id, aggregate_type, aggregate_id, event_type, topic, payload, headers)
    VALUES (eid, "@NAME@_enqueue".aggregate_type, "@NAME@_enqueue".aggregate_id,
            "@NAME@_enqueue".event_type, "@NAME@_enqueue".topic, "@NAME@_enqueue".payload, h)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING o.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT o.id INTO new_id FROM @TABLE@ o WHERE o.event_id = eid;
        IF new_id IS NULL THEN
            -- the conflicting row is gone already (published and deleted by a relay in
            -- OUTBOX_ON_SENT=delete mode, or by retention) or this snapshot cannot see it:
            -- the caller retries, as after any serialization failure
            RAISE EXCEPTION 'event_id % conflicts with a row this transaction cannot see', eid
                USING ERRCODE = 'serialization_failure';
        END IF;
    END IF;
    RETURN new_id;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_enqueue"(text, text, text, @PAYLOAD_TYPE@, jsonb, uuid, text, text, text) FROM PUBLIC;
