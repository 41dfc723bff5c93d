"""CloudEvents conformance of relayed messages, read by the CloudEvents Python SDK.

    cloudevents_check.py DUMP ROWS SOURCE

DUMP: outbox-check --dump lines ("event id<TAB>partition<TAB>key<TAB>value<TAB>headers<TAB>
timestamp", key and value in hex or "-", headers name=hexvalue joined by ';').
ROWS: one JSON object per published row: event_id, event_type, aggregate_id, created_ms (the
relay's Kafka timestamp of the row, ms), payload_hex (the bytes the value must be; null for a
NULL payload), content_type (the content-type the message must carry).
SOURCE: the relay's OUTBOX_CLOUDEVENTS_SOURCE.

Every message is parsed with the SDK's Kafka binding (cloudevents.core.bindings.kafka.
from_binary, binary content mode) and its attributes compared with its row's: specversion,
id, source, type, subject, time, datacontenttype, and the key as the partitionkey extension;
its value must be the payload byte for byte, and the SDK's data what the SDK makes of those
bytes for that content type (parsed JSON, text, or bytes). A tombstone (a NULL payload, a
null value) is checked separately: its ce_ headers are still the row's attributes (the SDK
types a value as bytes, so it reads it as b"" with no data). Every row must have a message.
Prints "CE-CHECK messages=.. rows=.. tombstones=.. mismatches=.." and exits 1 on any
mismatch or missing row, 2 when there is nothing to check.
"""
import json
import re
import sys
from datetime import datetime, timezone

from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat


def parse_headers(field):
    headers = {}
    for item in field.split(";") if field else []:
        name, _, value = item.partition("=")
        if name in headers:
            raise ValueError(f"header {name} twice: binary mode needs one value per attribute")
        if value == "-":  # a header without a value (the Debezium layout's NULL column)
            if name.lower().startswith("ce_") or name.lower() == "content-type":
                raise ValueError(f"attribute header {name} without a value")
            continue  # the SDK's KafkaMessage holds bytes; it ignores other headers anyway
        headers[name] = bytes.fromhex(value)
    return headers


def main():
    dump_path, rows_path, source = sys.argv[1:4]
    rows = {}
    with open(rows_path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                rows[row["event_id"]] = row
    mismatches, messages, tombstones, seen = [], 0, 0, set()

    def expect(what, got, want, event_id):
        if got != want:
            mismatches.append(f"{event_id}: {what} is {got!r}, want {want!r}")

    with open(dump_path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 6:
                mismatches.append(f"malformed dump line: {line!r}")
                continue
            event_id, _partition, key_hex, value_hex, header_field = fields[:5]
            row = rows.get(event_id)
            if row is None:
                mismatches.append(f"{event_id}: a message for no published row")
                continue
            messages += 1
            seen.add(event_id)
            headers = parse_headers(header_field)
            key = None if key_hex == "-" else bytes.fromhex(key_hex)
            value = None if value_hex == "-" else bytes.fromhex(value_hex)
            tombstone = value is None
            if tombstone:
                tombstones += 1
                expect("value of a NULL payload", value, None, event_id)
                expect("the row's payload", row["payload_hex"], None, event_id)
            event = from_binary(KafkaMessage(headers=headers, key=key, value=value if value is not None else b""),
                                JSONFormat())
            want_time = datetime.fromtimestamp(row["created_ms"] / 1000, tz=timezone.utc)
            expect("specversion", event.get_specversion(), "1.0", event_id)
            expect("id", event.get_id(), row["event_id"], event_id)
            expect("source", event.get_source(), source, event_id)
            expect("type", event.get_type(), row["event_type"], event_id)
            expect("subject", event.get_subject(), row["aggregate_id"], event_id)
            expect("time", event.get_time(), want_time, event_id)
            expect("datacontenttype", event.get_datacontenttype(), row["content_type"], event_id)
            expect("partitionkey", event.get_extension("partitionkey"), row["aggregate_id"], event_id)
            if tombstone:
                expect("data of a tombstone", event.get_data(), None, event_id)
                continue
            payload = bytes.fromhex(row["payload_hex"]) if row["payload_hex"] is not None else None
            expect("value bytes", value, payload, event_id)
            data = event.get_data()
            ctype = row["content_type"]
            # the SDK's documented reading: JSON for a JSON content type (+json too) when it
            # parses, else text when it is UTF-8, else the bytes
            want_data = None
            if payload:
                try:
                    text = payload.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
                want_data = text if text is not None else payload
                if text is not None and re.match(JSONFormat.JSON_CONTENT_TYPE_PATTERN, ctype):
                    try:
                        want_data = json.loads(text)
                    except ValueError:
                        pass
            expect("data", data, want_data, event_id)
    for event_id in rows.keys() - seen:
        mismatches.append(f"{event_id}: published row without a message")
    for m in mismatches[:20]:
        print("# " + m)
    print(f"CE-CHECK messages={messages} rows={len(rows)} tombstones={tombstones} mismatches={len(mismatches)}")
    if not rows or not messages:
        return 2
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
