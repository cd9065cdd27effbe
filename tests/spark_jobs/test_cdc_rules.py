"""Change-event rules on records Debezium really wrote (real Spark, no Kafka, no tables).

The records are ``tests/fixtures/debezium/*.jsonl``: what Debezium 3.6.1's PostgreSQL connector wrote to
Kafka through Connect's JSON converter, with and without schemas, for the SQL in that folder's README.
The end-to-end test against a running PostgreSQL is ``tests/integration/test_cdc_postgres.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.contract.transform_spec import DEBEZIUM_UNAVAILABLE, TransformSpec
from spark_jobs import cdc_rules, silver_rules, silver_table
from tests.spark_jobs.helpers import ACCOUNTS_SPEC, BRONZE_SCHEMA, T0

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
SPEC = ACCOUNTS_SPEC


def captured(kind: str = "json", topic_suffix: str = ".public.accounts") -> list[dict]:
    rows = [json.loads(line) for line in (FIXTURES / f"postgres-{kind}.jsonl").read_text().splitlines()]
    return [r for r in rows if r["topic"].endswith(topic_suffix)]


def bronze(spark, records: list[dict]):
    rows = [(r["topic"], r["partition"], r["offset"], T0, r["key"] and r["key"].encode(),
             r["value"] and r["value"].encode()) for r in records]  # fmt: skip
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


def decode(spark, records: list[dict], spec: TransformSpec = SPEC):
    return silver_rules.decode(bronze(spark, records), spec, spec.fields)


def classify(spark, records: list[dict], current=None, *, with_truncates: bool = True):
    # Kept, as the job keeps each batch's decoded records: the rules' filters are then not pushed into
    # the decode's expressions (whose plan would grow with every filter).
    decoded = decode(spark, records).cache()
    assert [r["_problems"] for r in decoded.collect() if r["_problems"]] == []
    valid = silver_rules.valid_records(decoded)
    if current is None:
        current = spark.createDataFrame([], silver_table.silver_ddl(SPEC.fields, cdc=True))
    truncates = cdc_rules.truncated_at(valid) if with_truncates else {}
    return silver_table.classify(valid, current, SPEC, SPEC.fields, truncates)


def by_position(rows) -> dict[tuple[int, int], dict]:
    return {(r["_kafka_partition"], r["_kafka_offset"]): r.asDict() for r in rows}


def test_captured_events_decode_to_their_rows_and_source_positions(spark):
    records = captured()
    rows = by_position(decode(spark, records).collect())
    assert all(r["_problems"] == [] for r in rows.values())
    ops = {pos: r["_cdc_op"] for pos, r in rows.items()}
    assert sorted(ops.values(), key=str) == sorted(["r", "u", "c", "u", "d", None, "d", None, "r", "u", "t", "c",
                                                    "c"], key=str)  # fmt: skip
    snapshot = next(r for r in rows.values() if r["_cdc_op"] == "r" and r["id"] == 1)
    # A snapshot row: no commit before it, the snapshot's LSN; balance read from Debezium's decimal text.
    assert (snapshot["_cdc_commit_lsn"], snapshot["owner"], str(snapshot["balance"])) == (None, "ann", "10.50")
    assert snapshot["_cdc_snapshot"] == "first" and snapshot["_cdc_lsn"] > 0
    # The update that left the TOASTed body unchanged: flagged, never written as the placeholder.
    unsent = next(r for r in rows.values() if r["_cdc_op"] == "u" and r["id"] == 2)
    assert (unsent["owner"], unsent["body"], unsent["_ph_body"]) == ("bobby", None, True)
    assert DEBEZIUM_UNAVAILABLE not in {r["body"] for r in rows.values()}
    # A delete's key comes from its before image, which also holds defaults for NOT NULL columns.
    deletes = sorted(r["id"] for r in rows.values() if r["_cdc_op"] == "d")
    assert deletes == [1, 3] and all(r["_tombstone"] for r in rows.values() if r["_cdc_op"] == "d")
    tombstones = [r for r in rows.values() if r["_null_value"]]
    assert sorted(r["id"] for r in tombstones) == [1, 3]
    assert {r["_skip"] for r in tombstones} == {"tombstone after a delete"}
    # Positions grow in the order the connector sent the changes, partition by partition.
    for partition in {p for p, _ in rows}:
        changes = [rows[pos] for pos in sorted(rows) if pos[0] == partition and not rows[pos]["_null_value"]]
        positions = [(c["_cdc_commit_lsn"] or -1, c["_cdc_lsn"]) for c in changes if c["_cdc_op"] != "r"]
        assert positions == sorted(positions)


def test_with_and_without_connects_schemas_the_rows_are_the_same(spark):
    def rows(kind: str) -> list[tuple]:
        out = []
        for r in decode(spark, captured(kind)).collect():
            assert r["_problems"] == []
            body = r["body"][:8] if r["body"] else r["body"]
            out.append((r["_cdc_op"] or "", r["id"] or 0, r["owner"] or "", str(r["balance"]), body,
                        bool(r["_ph_body"]), r["_skip"] or ""))  # fmt: skip
        return sorted(out)

    plain = rows("json")
    # Both decode the same changes: every kind the capture holds, not two empty lists.
    assert {op for op, *_ in plain} >= {"c", "u", "d"} and len(plain) == len(captured("json"))
    assert plain == rows("json-schemas")


def test_one_batch_of_the_whole_stream_ends_as_the_table_did(spark):
    # The table ends truncated with one row inserted after it: every change before the truncate is
    # superseded, whatever partition it is in.
    actions = by_position(classify(spark, captured()).collect())
    live = {r["id"] for r in actions.values() if r["_action"] == "insert"}
    assert live == {5}
    counted = sorted(r["_action"] for r in actions.values())
    assert counted.count("skipped") == 3  # two tombstones after deletes, and the truncate
    assert len(counted) == 13


def test_without_the_truncate_each_key_ends_at_its_last_change_and_unsent_values_are_filled(spark):
    records = [r for r in captured() if r["key"] is not None]  # the truncate is the one keyless event
    classified = classify(spark, records)
    rows = silver_table.silver_rows(classified, SPEC.fields, SPEC, "run-1").collect()
    state = {r["id"]: r.asDict() for r in rows}
    assert {k: r["_deleted"] for k, r in state.items()} == {1: True, 2: False, 3: True, 4: False, 5: False}
    # Key 1 moved to 4 (a primary-key update): a delete of 1 and a create of 4.
    assert (state[4]["owner"], str(state[4]["balance"])) == ("ann", "12.00")
    # Key 2's update did not send its TOASTed body: the snapshot's value (earlier in the batch) stays.
    assert state[2]["owner"] == "bobby" and state[2]["body"] == "x" * 10000 and not state[2]["_ph_body"]


def test_changes_the_connector_sends_again_change_nothing(spark):
    records = [r for r in captured() if r["key"] is not None]
    first = classify(spark, records)
    current = silver_table.silver_rows(first, SPEC.fields, SPEC, "run-1")
    # A connector that restarts before recording its offsets sends the same changes again, later in the
    # topic: each carries a position silver holds already.
    again = [{**r, "offset": r["offset"] + 100} for r in records]
    actions = {r["_action"] for r in classify(spark, again, current).collect()}
    assert actions <= {"superseded", "skipped"}, actions
    # And an older change sent after a newer one (a replay from further back) is refused as well.
    older = [{**r, "offset": 200} for r in records if r["partition"] == 0 and r["offset"] == 1]
    assert [r["_action"] for r in classify(spark, older, current).collect()] == ["superseded"]


def test_transaction_markers_and_messages_are_skipped_not_quarantined(spark):
    markers = captured(topic_suffix=".transaction") + captured(topic_suffix=".message")
    rows = decode(spark, markers).collect()
    assert all(r["_problems"] == [] for r in rows)
    kinds = sorted({r["_skip"] for r in rows})
    assert kinds == ["logical decoding message", "transaction marker"]
    assert {r["_action"] for r in classify(spark, markers).collect()} == {"skipped"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda v: {"order_id": "o1"}, "value: expected a Debezium change event (an object with op, before, "),
        (lambda v: {**v, "source": {**v["source"], "connector": "mysql"}},
         "value: source.connector: expected 'postgresql' (transform.source), got mysql"),
        (lambda v: {**v, "op": "x"}, "value: op: expected one of c, r, u, d, t (or m, skipped), got \"x\""),
        (lambda v: {**v, "op": "d", "before": None, "after": None},
         "value: before: a delete (op d) must carry the deleted row's key columns, got null"),
        (lambda v: {**v, "after": None}, "value: after: a change with op u must carry the row after the change"),
        (lambda v: {**v, "source": {**v["source"], "sequence": "[\"x\"]"}},
         "value: source.sequence: expected a JSON array of two decimal LSNs as text, got [\"x\"]"),
        (lambda v: {**v, "after": {**v["after"], "owner": None}}, "owner: required, got null"),
    ],
)  # fmt: skip
def test_a_broken_change_event_goes_to_quarantine_naming_what_is_wrong(spark, change, expected):
    update = next(r for r in captured() if r["value"] and json.loads(r["value"])["op"] == "u")
    broken = {**update, "value": json.dumps(change(json.loads(update["value"])))}
    problems = decode(spark, [broken]).collect()[0]["_problems"]
    assert problems and expected in problems[0]["message"], problems


def test_a_tombstone_whose_key_is_not_json_is_skipped_not_quarantined(spark):
    # Debezium's Avro converter writes keys in Avro: a tombstone's key then names no row, and its delete
    # came before it. A JSON key that lacks the key field is a problem, as it is for any tombstone.
    tombstone = next(r for r in captured() if r["value"] is None)
    avro_key = {**tombstone, "key": "\x00\x00\x00\x00\x07\x06"}
    no_field = {**tombstone, "key": '{"other": 1}', "offset": tombstone["offset"] + 1}
    rows = by_position(decode(spark, [avro_key, no_field]).collect())
    assert rows[(avro_key["partition"], avro_key["offset"])]["_problems"] == []
    assert [p["message"] for p in rows[(no_field["partition"], no_field["offset"])]["_problems"]] == [
        'key: a tombstone deletes the row named by its Kafka key, expected a JSON object with id for field id, '
        'got {"other": 1}'
    ]
    assert [r["_action"] for r in classify(spark, [avro_key]).collect()] == ["skipped"]


# A primary-key change (UPDATE ... SET id = 4 WHERE id = 1) of a row whose TOASTed body did not change: a
# delete of key 1 and a create of key 4 at one source position, in different partitions, the create
# carrying the old key in Debezium's header and the body as the placeholder. The events are the captured
# ones (tests/fixtures/debezium), with the body made large and left unsent, as PostgreSQL sends it.
BIG = "big " * 3000
HEADED_SCHEMA = BRONZE_SCHEMA + ", headers array<struct<key: string, value: binary>>"


def _event(op: str, key: int, *, lsn: int, body: str | None, old_key: int | None = None, partition: int = 0,
           offset: int = 0) -> dict:  # fmt: skip
    template = next(json.loads(r["value"]) for r in captured() if r["value"] and json.loads(r["value"])["op"] == "c")
    row = {**template["after"], "id": key, "owner": f"owner-{key}", "body": body}
    value = {**template, "op": op, "before": {"id": key} if op == "d" else None, "after": None if op == "d" else row,
             "source": {**template["source"], "lsn": lsn, "sequence": json.dumps([str(lsn), str(lsn)])}}  # fmt: skip
    headers = [("__debezium.oldkey", json.dumps({"id": old_key}).encode())] if old_key is not None else []
    return {"topic": template["source"]["name"] + ".public.accounts", "partition": partition, "offset": offset,
            "key": json.dumps({"id": key}), "value": json.dumps(value), "headers": headers}  # fmt: skip


def _headed(spark, records: list[dict]):
    rows = [(r["topic"], r["partition"], r["offset"], T0, r["key"].encode(), r["value"] and r["value"].encode(),
             r["headers"]) for r in records]  # fmt: skip
    return spark.createDataFrame(rows, HEADED_SCHEMA)


def _moved(spark, records: list[dict], current=None):
    decoded = silver_rules.decode(_headed(spark, records), SPEC, SPEC.fields).cache()
    assert [r["_problems"] for r in decoded.collect() if r["_problems"]] == []
    if current is None:
        current = spark.createDataFrame([], silver_table.silver_ddl(SPEC.fields, cdc=True))
    classified = silver_table.classify(silver_rules.valid_records(decoded), current, SPEC, SPEC.fields, {})
    return decoded, classified.cache()


def _silver(spark, records: list[dict]):
    _, classified = _moved(spark, records)
    return silver_table.silver_rows(classified, SPEC.fields, SPEC, "run-0")


def _state(classified) -> dict[int, dict]:
    rows = silver_table.silver_rows(classified, SPEC.fields, SPEC, "run-1").collect()
    return {r["id"]: r.asDict() for r in rows}


PH = DEBEZIUM_UNAVAILABLE


def test_a_primary_key_change_takes_the_unsent_value_from_the_old_keys_row_in_the_batch(spark):
    batch = [_event("c", 1, lsn=100, body=BIG), _event("u", 1, lsn=200, body=PH, offset=1),
             _event("d", 1, lsn=300, body=None, offset=2),
             _event("c", 4, lsn=300, body=PH, old_key=1, partition=2)]  # fmt: skip
    _, classified = _moved(spark, batch)
    state = _state(classified)
    assert state[4]["body"] == BIG and not state[4]["_ph_body"]
    assert state[1]["_deleted"]


def test_a_primary_key_change_takes_the_unsent_value_from_silver_when_the_batch_lacks_it(spark):
    silver = _silver(spark, [_event("c", 1, lsn=100, body=BIG)])
    # The delete in the batch, or still to come in a later one (another partition): silver's row stands.
    for batch in ([_event("d", 1, lsn=300, body=None, offset=5), _event("c", 4, lsn=300, body=PH, old_key=1,
                                                                          partition=2)],
                  [_event("c", 4, lsn=300, body=PH, old_key=1, partition=2)]):  # fmt: skip
        _, classified = _moved(spark, batch, silver)
        assert _state(classified)[4]["body"] == BIG


def test_the_old_keys_value_is_the_one_before_the_change_never_a_later_one(spark):
    silver = _silver(spark, [_event("c", 1, lsn=100, body="old")])
    # Key 1 is taken again after the change (a new row, with a body of its own) in the same batch.
    batch = [_event("c", 4, lsn=300, body=PH, old_key=1, partition=2),
             _event("d", 1, lsn=300, body=None, offset=5), _event("c", 1, lsn=400, body="reborn", offset=7)]  # fmt: skip
    _, classified = _moved(spark, batch, silver)
    state = _state(classified)
    assert (state[4]["body"], state[1]["body"]) == ("old", "reborn")


def test_an_unsent_value_nothing_holds_goes_to_quarantine_naming_the_column_never_null(spark):
    # Silver never held key 1 (the connector started without a snapshot): key 4's body cannot be known.
    batch = [_event("d", 1, lsn=300, body=None), _event("c", 4, lsn=300, body=PH, old_key=1, partition=2),
             _event("c", 9, lsn=310, body="fine", partition=2, offset=1)]  # fmt: skip
    decoded, classified = _moved(spark, batch)
    actions = {r["id"]: r["_action"] for r in classified.collect() if not r["_null_value"]}
    assert actions == {1: "delete", 4: cdc_rules.UNKNOWN_VALUE, 9: "insert"}
    assert 4 not in _state(classified)
    bad = [r for r in cdc_rules.with_unknown_values(decoded, classified).collect() if r["_problems"]]
    assert [(r["id"], r["_problems"][0]["field"]) for r in bad] == [(4, "body")]
    message = bad[0]["_problems"][0]["message"]
    assert "primary-key change from key {\"id\": 1}" in message and "REPLICA IDENTITY FULL" in message, message
    # An update of a key silver holds as deleted, with its body unsent, is refused the same way.
    deleted = _silver(spark, [_event("c", 4, lsn=100, body="x"), _event("d", 4, lsn=200, body=None, offset=1)])
    _, again = _moved(spark, [_event("u", 4, lsn=250, body=PH, offset=3)], deleted)
    assert [r["_action"] for r in again.collect()] == [cdc_rules.UNKNOWN_VALUE]
