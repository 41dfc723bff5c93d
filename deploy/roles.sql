-- Least-privilege roles for one outbox table, run by its owner (the role that ran
-- `outbox-relay migrate`) after migrate:
--   psql -v schema=public -v table=outbox -v relay=outbox_relay -v writer=app_writer \
--        -f deploy/roles.sql
-- The roles must exist (CREATE ROLE ... LOGIN). Three roles in all:
--   owner   runs `outbox-relay migrate` (and this file); owns the table and its helpers;
--   relay   the relay's runtime role: reads and marks rows, writes its own bookkeeping,
--           and sees every session's transactions (pg_read_all_stats) so that it can name
--           a long transaction of another role;
--   writer  the application: INSERT on the outbox table, or EXECUTE on <table>_enqueue
--           (the writers' function), and nothing else (the doorbell trigger and the
--           function run with their owner's rights). On a Debezium outbox table, INSERT:
--           writers that also delete their rows (remove-after-insert) keep their own grant.
-- Row-level security on the outbox table would hide rows from the relay: it refuses to
-- start unless its role bypasses it.
\set ON_ERROR_STOP on
\set doorbell :table '_doorbell'
\set bell :table '_bell'
\set relay_state :table '_relay_state'
\set lease_log :table '_lease_log'
\set enqueue :table '_enqueue'
\set watermark :table '_watermark'
\set published :table '_published'
\set parked :table '_parked'
\set kept :table '_kept'
\set partitions :table '_partitions'

\set relay_rows :table '_relay_rows'

GRANT USAGE ON SCHEMA :"schema" TO :"relay", :"writer";

GRANT INSERT ON :"schema".:"table" TO :"writer";

-- The layout: a Debezium outbox table (OUTBOX_LAYOUT=debezium) has the view <table>_relay_rows,
-- through which the relay reads, marks and deletes rows (the view acts on the table with
-- its owner's rights); it has no writers' function.
SELECT to_regclass(format('%I.%I', :'schema', :'relay_rows')) IS NOT NULL AS debezium \gset
\if :debezium
GRANT SELECT, UPDATE, DELETE ON :"schema".:"relay_rows" TO :"relay";
\else
GRANT EXECUTE ON FUNCTION :"schema".:"enqueue" TO :"writer";
GRANT SELECT, UPDATE, DELETE ON :"schema".:"table" TO :"relay";
-- OUTBOX_ON_SENT=keep (schema 7): the relay's watermark, published records and parked rows
GRANT SELECT, INSERT, UPDATE ON :"schema".:"watermark" TO :"relay";
GRANT SELECT, INSERT, DELETE ON :"schema".:"published" TO :"relay";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".:"parked" TO :"relay";
GRANT SELECT ON :"schema".:"kept" TO :"relay";
-- keep mode's id-range partitions (schema 9): made ahead and dropped by the owner's function
GRANT EXECUTE ON FUNCTION :"schema".:"partitions"(integer, integer, bigint) TO :"relay";
-- keep mode checks that the id's sequence was never rewound below its rows or a watermark
SELECT pg_get_serial_sequence(format('%I.%I', :'schema', :'table'), 'id') AS id_seq \gset
GRANT SELECT ON SEQUENCE :id_seq TO :"relay";
\endif
GRANT SELECT, UPDATE ON :"schema".:"doorbell" TO :"relay";
GRANT UPDATE ON SEQUENCE :"schema".:"bell" TO :"relay";
GRANT SELECT, INSERT, UPDATE ON :"schema".:"relay_state" TO :"relay";
GRANT SELECT, INSERT ON :"schema".:"lease_log" TO :"relay";
GRANT SELECT ON :"schema".outbox_relay_schema TO :"relay";
GRANT pg_read_all_stats TO :"relay";
