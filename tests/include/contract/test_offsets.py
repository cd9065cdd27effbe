"""Unit tests of the offset contract (include/contract/offsets.py): pure logic, no Kafka, Spark or Delta."""

from __future__ import annotations

import json

import pytest

from include.contract.jobs import bronze_app_id
from include.contract.offsets import (
    COMMIT_FORMAT,
    COMMIT_FORMAT_VERSION,
    BronzeCommit,
    CommitMetadataError,
    Gap,
    OffsetError,
    OffsetRange,
    advance,
    flatten,
    positions_from_json,
    positions_to_json,
    skip_gaps,
)

# --------------------------------------------------------------------------- OffsetRange


def test_offset_range_valid_dense_range_has_no_holes():
    r = OffsetRange("orders", 2, 10, 15, 5)
    assert r.holes == 0
    assert r.topic_partition == ("orders", 2)


def test_offset_range_counts_holes_from_markers_and_compaction():
    r = OffsetRange("orders", 0, 10, 20, 7)
    assert r.holes == 3


def test_offset_range_may_hold_only_holes():
    r = OffsetRange("orders", 0, 10, 12, 0)
    assert r.rows == 0
    assert r.holes == 2


def test_offset_range_empty_range_is_allowed():
    r = OffsetRange("orders", 0, 7, 7, 0)
    assert r.holes == 0


def test_offset_range_rejects_negative_start():
    with pytest.raises(OffsetError) as exc:
        OffsetRange("orders", 1, -1, 5, 0)
    msg = str(exc.value)
    assert "orders-1" in msg
    assert "[-1, 5)" in msg


def test_offset_range_rejects_end_before_start():
    with pytest.raises(OffsetError) as exc:
        OffsetRange("orders", 3, 9, 8, 0)
    msg = str(exc.value)
    assert "orders-3" in msg
    assert "[9, 8)" in msg


def test_offset_range_rejects_more_rows_than_offsets():
    with pytest.raises(OffsetError) as exc:
        OffsetRange("orders", 0, 10, 12, 3)
    msg = str(exc.value)
    assert "orders-0" in msg
    assert "3 rows" in msg
    assert "[10, 12)" in msg
    assert "2 offsets" in msg


def test_offset_range_rejects_negative_rows():
    with pytest.raises(OffsetError, match="-1 rows"):
        OffsetRange("orders", 0, 10, 12, -1)


def test_offset_error_is_a_value_error():
    # Callers that catch ValueError (argparse, json handling) still see it.
    assert issubclass(OffsetError, ValueError)
    assert issubclass(CommitMetadataError, OffsetError)


def test_offset_range_json_round_trip():
    r = OffsetRange("orders", 4, 100, 250, 140)
    data = r.to_json()
    assert data == {"topic": "orders", "partition": 4, "from": 100, "until": 250, "rows": 140}
    assert OffsetRange.from_json(json.loads(json.dumps(data))) == r


def test_offset_range_from_json_coerces_string_numbers():
    r = OffsetRange.from_json({"topic": "t", "partition": "1", "from": "2", "until": "5", "rows": "3"})
    assert r == OffsetRange("t", 1, 2, 5, 3)


def test_offset_range_from_json_validates():
    with pytest.raises(OffsetError):
        OffsetRange.from_json({"topic": "t", "partition": 0, "from": 5, "until": 4, "rows": 0})


def test_offset_ranges_sort_by_topic_partition_then_offset():
    a = OffsetRange("b", 0, 0, 1, 1)
    b = OffsetRange("a", 10, 0, 1, 1)
    c = OffsetRange("a", 2, 5, 6, 1)
    d = OffsetRange("a", 2, 0, 5, 5)
    assert sorted([a, b, c, d]) == [d, c, b, a]


# --------------------------------------------------------------------------- position maps


def test_positions_from_json_converts_partition_keys_to_int():
    assert positions_from_json({"t1": {"0": 5, "10": 7}, "t2": {"3": 0}}) == {
        "t1": {0: 5, 10: 7},
        "t2": {3: 0},
    }


def test_positions_to_json_uses_string_keys_sorted_numerically():
    out = positions_to_json({"zeta": {10: 1, 2: 3}, "alpha": {0: 9}})
    assert out == {"alpha": {"0": 9}, "zeta": {"2": 3, "10": 1}}
    assert list(out) == ["alpha", "zeta"]
    assert list(out["zeta"]) == ["2", "10"]  # numeric, not lexical, order


def test_positions_round_trip_through_json_text():
    positions = {"t1": {0: 13, 1: 13, 12: 0}, "t2": {5: 99}}
    text = json.dumps(positions_to_json(positions))
    assert positions_from_json(json.loads(text)) == positions


def test_positions_to_json_matches_spark_kafka_offset_shape():
    # Spark's startingOffsets / offset log JSON: {"topic":{"partition":offset}}
    assert json.dumps(positions_to_json({"t1": {1: 13, 0: 13}}), separators=(",", ":")) == (
        '{"t1":{"0":13,"1":13}}'
    )


def test_positions_empty():
    assert positions_from_json({}) == {}
    assert positions_to_json({}) == {}
    assert flatten({}) == {}


def test_flatten():
    assert flatten({"a": {0: 1, 1: 2}, "b": {0: 3}}) == {("a", 0): 1, ("a", 1): 2, ("b", 0): 3}


# --------------------------------------------------------------------------- advance


def test_advance_continues_each_partition():
    positions = {"t": {0: 10, 1: 20}}
    ranges = [OffsetRange("t", 0, 10, 15, 5), OffsetRange("t", 1, 20, 21, 1)]
    assert advance(positions, ranges) == {"t": {0: 15, 1: 21}}


def test_advance_keeps_partitions_without_ranges():
    positions = {"t": {0: 10, 1: 20}, "u": {0: 3}}
    assert advance(positions, [OffsetRange("t", 0, 10, 12, 2)]) == {"t": {0: 12, 1: 20}, "u": {0: 3}}


def test_advance_does_not_mutate_its_input():
    positions = {"t": {0: 10}}
    advance(positions, [OffsetRange("t", 0, 10, 12, 2), OffsetRange("t", 1, 0, 4, 4)])
    assert positions == {"t": {0: 10}}


def test_advance_with_no_ranges_is_a_copy():
    positions = {"t": {0: 10}}
    out = advance(positions, [])
    assert out == positions
    assert out is not positions
    assert out["t"] is not positions["t"]


def test_advance_allows_holes_inside_ranges():
    # rows < until - from is fine: only the boundaries must line up.
    assert advance({"t": {0: 10}}, [OffsetRange("t", 0, 10, 20, 3)]) == {"t": {0: 20}}


def test_advance_allows_new_partitions_to_start_anywhere():
    out = advance({"t": {0: 10}}, [OffsetRange("t", 1, 57, 60, 3), OffsetRange("new", 0, 4, 5, 1)])
    assert out == {"t": {0: 10, 1: 60}, "new": {0: 5}}


def test_advance_from_empty_table():
    assert advance({}, [OffsetRange("t", 0, 0, 3, 3)]) == {"t": {0: 3}}


def test_advance_chains_several_ranges_of_one_partition_in_any_input_order():
    ranges = [OffsetRange("t", 0, 15, 20, 5), OffsetRange("t", 0, 10, 15, 4)]
    assert advance({"t": {0: 10}}, ranges) == {"t": {0: 20}}


def test_advance_rejects_gap_with_numbers():
    with pytest.raises(OffsetError) as exc:
        advance({"t": {0: 10, 1: 0}}, [OffsetRange("t", 0, 13, 20, 7)])
    msg = str(exc.value)
    assert "t-0" in msg
    assert "[13, 20)" in msg
    assert "next offset 10" in msg
    assert "gap of 3 offsets" in msg
    assert "overlap" not in msg


def test_advance_rejects_overlap_with_numbers():
    with pytest.raises(OffsetError) as exc:
        advance({"t": {2: 10}}, [OffsetRange("t", 2, 4, 20, 16)])
    msg = str(exc.value)
    assert "t-2" in msg
    assert "[4, 20)" in msg
    assert "next offset 10" in msg
    assert "overlap of 6 offsets" in msg
    assert "gap" not in msg


def test_advance_rejects_gap_between_two_ranges_of_one_batch():
    with pytest.raises(OffsetError, match=r"\[16, 20\).*next offset 15.*gap of 1 offsets"):
        advance({"t": {0: 10}}, [OffsetRange("t", 0, 10, 15, 5), OffsetRange("t", 0, 16, 20, 4)])


def test_advance_rejects_replay_of_the_same_range():
    r = OffsetRange("t", 0, 10, 15, 5)
    with pytest.raises(OffsetError, match="overlap of 5 offsets"):
        advance({"t": {0: 10}}, [r, r])


def test_advance_empty_range_must_still_be_in_place():
    with pytest.raises(OffsetError, match="gap of 2 offsets"):
        advance({"t": {0: 10}}, [OffsetRange("t", 0, 12, 12, 0)])


# --------------------------------------------------------------------------- BronzeCommit


def _commit(**overrides) -> BronzeCommit:
    values = dict(
        pipeline="orders",
        run_id="scheduled__2024-01-01T00:00:00",
        run_type="scheduled",
        epoch=2,
        batch_id=7,
        ranges=(OffsetRange("t", 0, 10, 15, 5), OffsetRange("t", 1, 0, 4, 2)),
        next_offsets={"t": {0: 15, 1: 4, 2: 0}},
        extra={"checkpoint_rebuilt": {"reason": "no checkpoint found", "previous_epoch": None}},
    )
    values.update(overrides)
    return BronzeCommit(**values)


def test_bronze_commit_rows_sums_ranges():
    assert _commit().rows == 7
    assert _commit(ranges=()).rows == 0


def test_bronze_commit_user_metadata_round_trip():
    c = _commit()
    text = c.to_user_metadata()
    back = BronzeCommit.from_user_metadata(text, version=12)
    assert back == c
    assert back.next_offsets == {"t": {0: 15, 1: 4, 2: 0}}
    assert back.extra == {"checkpoint_rebuilt": {"reason": "no checkpoint found", "previous_epoch": None}}


def test_bronze_commit_user_metadata_round_trip_without_version():
    c = _commit(extra={})
    assert BronzeCommit.from_user_metadata(c.to_user_metadata()) == c


def test_bronze_commit_user_metadata_content():
    data = json.loads(_commit().to_user_metadata())
    assert data["format"] == COMMIT_FORMAT == "kafka-delta-elt/bronze-commit"
    assert data["version"] == COMMIT_FORMAT_VERSION == 1
    assert data["pipeline"] == "orders"
    assert data["run_id"] == "scheduled__2024-01-01T00:00:00"
    assert data["run_type"] == "scheduled"
    assert data["epoch"] == 2
    assert data["batch_id"] == 7
    assert data["next_offsets"] == {"t": {"0": 15, "1": 4, "2": 0}}
    assert data["ranges"] == [
        {"topic": "t", "partition": 0, "from": 10, "until": 15, "rows": 5},
        {"topic": "t", "partition": 1, "from": 0, "until": 4, "rows": 2},
    ]


def test_bronze_commit_user_metadata_is_compact_and_stable():
    a = _commit(
        ranges=(OffsetRange("t", 1, 0, 4, 2), OffsetRange("t", 0, 10, 15, 5)),
        next_offsets={"t": {2: 0, 1: 4, 0: 15}},
    )
    b = _commit()
    text = a.to_user_metadata()
    assert text == b.to_user_metadata()  # range and key order do not matter
    assert " " not in text.replace("no checkpoint found", "")  # compact separators
    keys = list(json.loads(text))
    assert keys == sorted(keys)


def test_bronze_commit_from_user_metadata_sorts_ranges():
    c = _commit(ranges=(OffsetRange("t", 1, 0, 4, 2), OffsetRange("t", 0, 10, 15, 5)))
    back = BronzeCommit.from_user_metadata(c.to_user_metadata())
    assert back.ranges == (OffsetRange("t", 0, 10, 15, 5), OffsetRange("t", 1, 0, 4, 2))


def test_bronze_commit_missing_extra_defaults_to_empty():
    data = json.loads(_commit().to_user_metadata())
    del data["extra"]
    back = BronzeCommit.from_user_metadata(json.dumps(data))
    assert back.extra == {}
    data["extra"] = None
    assert BronzeCommit.from_user_metadata(json.dumps(data)).extra == {}


@pytest.mark.parametrize("text", [None, ""])
def test_from_user_metadata_absent_is_not_ours(text):
    assert BronzeCommit.from_user_metadata(text, version=3) is None


@pytest.mark.parametrize(
    "text",
    [
        "not json at all",
        "{broken",
        "OPTIMIZE by the nightly job",
        "[1, 2, 3]",
        '"a json string"',
        "42",
        "null",
        '{"format": "someone-else/commit", "version": 1}',
        '{"note": "manual MERGE by alice"}',
        '{"format": "kafka-delta-elt/silver-commit", "version": 1, "pipeline": "x"}',
    ],
)
def test_from_user_metadata_foreign_is_not_ours(text):
    assert BronzeCommit.from_user_metadata(text, version=3) is None


@pytest.mark.parametrize("bad_version", [2, 0, None, "1"])
def test_from_user_metadata_wrong_format_version_names_delta_version(bad_version):
    data = json.loads(_commit().to_user_metadata())
    data["version"] = bad_version
    with pytest.raises(CommitMetadataError) as exc:
        BronzeCommit.from_user_metadata(json.dumps(data), version=41)
    msg = str(exc.value)
    assert "Delta commit version 41" in msg
    assert repr(bad_version) in msg
    assert "expected 1" in msg


def test_from_user_metadata_missing_format_version_names_delta_version():
    data = json.loads(_commit().to_user_metadata())
    del data["version"]
    with pytest.raises(CommitMetadataError, match="Delta commit version 5:.*None"):
        BronzeCommit.from_user_metadata(json.dumps(data), version=5)


def _broken(mutate) -> str:
    data = json.loads(_commit().to_user_metadata())
    mutate(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d.pop("pipeline"), id="missing-pipeline"),
        pytest.param(lambda d: d.pop("epoch"), id="missing-epoch"),
        pytest.param(lambda d: d.pop("batch_id"), id="missing-batch-id"),
        pytest.param(lambda d: d.pop("ranges"), id="missing-ranges"),
        pytest.param(lambda d: d.pop("next_offsets"), id="missing-next-offsets"),
        pytest.param(lambda d: d.update(epoch="two"), id="epoch-not-a-number"),
        pytest.param(lambda d: d.update(batch_id=None), id="batch-id-null"),
        pytest.param(lambda d: d.update(ranges=None), id="ranges-null"),
        pytest.param(lambda d: d.update(ranges=[5]), id="range-not-an-object"),
        pytest.param(lambda d: d["ranges"][0].pop("rows"), id="range-missing-rows"),
        pytest.param(lambda d: d["ranges"][0].update({"until": 3}), id="range-end-before-start"),
        pytest.param(lambda d: d["ranges"][0].update({"rows": 99}), id="range-too-many-rows"),
        pytest.param(lambda d: d.update(next_offsets={"t": {"zero": 1}}), id="partition-not-a-number"),
        pytest.param(lambda d: d.update(next_offsets={"t": {"0": None}}), id="offset-null"),
        pytest.param(lambda d: d.update(extra="oops"), id="extra-not-an-object"),
    ],
)
def test_from_user_metadata_malformed_names_delta_version(mutate):
    with pytest.raises(CommitMetadataError) as exc:
        BronzeCommit.from_user_metadata(_broken(mutate), version=17)
    msg = str(exc.value)
    assert msg.startswith("Delta commit version 17: malformed bronze commit metadata")


def test_from_user_metadata_malformed_without_version_says_commit_metadata():
    with pytest.raises(CommitMetadataError, match=r"^commit metadata: malformed"):
        BronzeCommit.from_user_metadata(_broken(lambda d: d.pop("ranges")))


@pytest.mark.parametrize(
    "next_offsets",
    [[], None, "t:0:5", {"t": [15, 4]}],
    ids=["list", "null", "string", "topic-maps-to-list"],
)
def test_from_user_metadata_non_object_next_offsets_names_delta_version(next_offsets):
    text = _broken(lambda d: d.update(next_offsets=next_offsets))
    with pytest.raises(CommitMetadataError, match="Delta commit version 17"):
        BronzeCommit.from_user_metadata(text, version=17)


# --------------------------------------------------------------------------- txn app id


def test_txn_app_id_differs_per_epoch_and_pipeline():
    assert bronze_app_id("orders", 1) == "kafka-delta-elt:orders:bronze:epoch-1"
    assert bronze_app_id("orders", 2) == "kafka-delta-elt:orders:bronze:epoch-2"
    ids = {bronze_app_id(p, e) for p in ("orders", "payments") for e in (1, 2, 10)}
    assert len(ids) == 6


# --------------------------------------------------------------------------- gaps


def test_skip_gaps_moves_only_the_gap_partitions():
    gaps = [Gap("t", 1, 20, 35, "retention"), Gap("u", 0, 0, 4)]
    assert skip_gaps({"t": {0: 10, 1: 20}}, gaps) == {"t": {0: 10, 1: 35}, "u": {0: 4}}


def test_skip_gaps_refuses_a_gap_elsewhere():
    with pytest.raises(OffsetError, match=r"t-0: gap \[11, 12\) does not start at the table's next offset 10"):
        skip_gaps({"t": {0: 10}}, [Gap("t", 0, 11, 12)])


@pytest.mark.parametrize("frm,until", [(5, 5), (6, 5), (-1, 3)])
def test_gap_must_be_a_non_empty_range(frm, until):
    with pytest.raises(OffsetError, match="not a valid offset range"):
        Gap("t", 0, frm, until)


def test_gap_json_round_trip():
    gap = Gap("t", 3, 7, 19, "deleted by retention")
    assert Gap.from_json(json.loads(json.dumps(gap.to_json()))) == gap
    assert gap.offsets == 12
