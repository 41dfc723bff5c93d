-- Run once by the postgres image on first start (docker-entrypoint-initdb.d): the writer's
-- database (orders) with a business table, and the consumer's (billing) with the handler
-- outbox-inbox calls for each new event. outbox-relay migrate and outbox-inbox migrate
-- create the outbox and inbox tables themselves.
CREATE DATABASE orders;
CREATE DATABASE billing;
\connect orders
CREATE TABLE orders (id text PRIMARY KEY, total numeric NOT NULL);
\connect billing
CREATE TABLE revenue (order_id text PRIMARY KEY, total numeric NOT NULL);
CREATE FUNCTION book_order(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
RETURNS void LANGUAGE sql AS 'INSERT INTO revenue VALUES (key, (payload->>''total'')::numeric)';
