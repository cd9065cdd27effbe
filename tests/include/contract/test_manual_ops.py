"""Manual operations: the trigger form, the run's params, and backfill plans against hand-made Kafka and table states."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from airflow.sdk import Param
from airflow.sdk.exceptions import ParamValidationError

from include.contract.actions import (
    ACTIONS,
    AIRFLOW_BACKFILL,
    BACKFILL_OFFSETS,
    BACKFILL_TIME,
    NORMAL,
    SKIP_OFFSETS,
    OffsetRequest,
    RequestError,
    RunRequest,
)
from include.contract.backfill_plan import plan_offsets_backfill, plan_skip, plan_time_backfill
from include.contract.manual_ops import FORM_KEYS, form_params, parse_request
from include.contract.offsets import BackfillRange, PartitionState, TopicState
from include.contract.replay import ReplaySelection

T0 = datetime(2026, 11, 20, tzinfo=UTC)
T1 = datetime(2026, 11, 21, tzinfo=UTC)

#: orders-0 lost [0, 10) to retention; orders-2 is new and not ingested yet.
KAFKA = {
    "orders": TopicState("orders", "id-orders", {0: PartitionState(10, 200), 1: PartitionState(0, 150),
                                                 2: PartitionState(0, 50)}),
    "payments": TopicState("payments", "id-payments", {0: PartitionState(0, 50), 1: PartitionState(5, 60)}),
}  # fmt: skip
TABLE = {"orders": {0: 180, 1: 100}, "payments": {0: 50, 1: 40}}


def offsets_request(*ranges: dict) -> RunRequest:
    return parse_request({"action": BACKFILL_OFFSETS, "reason": "replay", "offset_ranges": list(ranges)},
                         run_type="manual")  # fmt: skip


def time_request(action: str = BACKFILL_TIME) -> RunRequest:
    return RunRequest(action, "late records", "alice", (), T0, T1)


def plan_offsets(*ranges: dict, kafka=KAFKA, table=TABLE):
    return plan_offsets_backfill(offsets_request(*ranges), pipeline="orders", kafka=kafka, table_next=table)


def refusal(*ranges: dict, kafka=KAFKA, table=TABLE) -> str:
    with pytest.raises(RequestError) as info:
        plan_offsets(*ranges, kafka=kafka, table=table)
    return str(info.value)


# --------------------------------------------------------------------------- parse_request


def test_empty_params_are_a_normal_run():
    request = parse_request({}, run_type="scheduled")
    assert request == RunRequest(NORMAL, "", None, (), None, None)
    assert not request.is_backfill
    assert request.describe() == "normal run"


def test_backfill_offsets_request_is_parsed_and_described():
    request = parse_request(
        {"action": BACKFILL_OFFSETS, "reason": "  replay after bug  ", "offset_ranges": [
            {"topic": "orders", "partition": 0, "from": 5, "until": 10},
            {"topic": "payments", "from": 0, "until": 3},
        ]},
        run_type="manual", requested_by="alice",
    )  # fmt: skip
    assert request.offset_ranges == (OffsetRequest("orders", 0, 5, 10), OffsetRequest("payments", None, 0, 3))
    assert request.reason == "replay after bug"
    assert request.is_backfill
    assert request.describe() == "backfill_offsets orders-0 [5, 10), payments-* [0, 3) by alice: replay after bug"
    assert request.offset_ranges[1].to_json() == {"topic": "payments", "partition": None, "from": 0, "until": 3}


def test_backfill_time_request_accepts_z_and_is_described():
    request = parse_request(
        {"action": BACKFILL_TIME, "reason": "late", "from_time": "2026-11-20T00:00:00Z",
         "to_time": "2026-11-21T01:00:00+01:00"},
        run_type="manual",
    )  # fmt: skip
    assert request.from_time == T0
    assert request.to_time == T1  # 01:00+01:00 is midnight UTC
    assert request.describe() == "backfill_time [2026-11-20T00:00:00+00:00, 2026-11-21T01:00:00+01:00): late"


def test_unknown_action_names_the_allowed_ones():
    with pytest.raises(RequestError, match=r"action: expected one of normal, backfill_offsets, backfill_time, "
                                           r"rebuild_checkpoint, acknowledge_gap, skip_offsets, reestablish_position, reread_after_restore, "
                                               r"keep_position_after_restore, replay_quarantine, got 'delete'"):  # fmt: skip
        parse_request({"action": "delete", "reason": "x"}, run_type="manual")


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_every_action_but_normal_needs_a_reason(reason):
    with pytest.raises(RequestError, match=r"reason: required for action 'rebuild_checkpoint'"):
        parse_request({"action": "rebuild_checkpoint", "reason": reason}, run_type="manual")


def test_reason_longer_than_500_characters_is_refused():
    with pytest.raises(RequestError, match=r"reason: at most 500 characters, got 501"):
        parse_request({"action": "acknowledge_gap", "reason": "x" * 501}, run_type="manual")
    assert parse_request({"action": "acknowledge_gap", "reason": "x" * 500}, run_type="manual").reason == "x" * 500


def test_offset_ranges_with_another_action_are_refused():
    with pytest.raises(RequestError, match=r"offset_ranges is set but action is 'normal'; choose 'backfill_offsets'"):
        parse_request({"offset_ranges": [{"topic": "orders", "from": 0, "until": 1}]}, run_type="manual")


def test_times_with_another_action_are_refused():
    with pytest.raises(RequestError, match=r"from_time/to_time are set but action is 'backfill_offsets'; "
                                           r"choose 'backfill_time'"):  # fmt: skip
        parse_request({"action": BACKFILL_OFFSETS, "reason": "r", "to_time": "2026-11-21T00:00:00Z",
                       "offset_ranges": [{"topic": "orders", "from": 0, "until": 1}]}, run_type="manual")  # fmt: skip


def test_backfill_offsets_needs_offset_ranges():
    with pytest.raises(RequestError, match=r"offset_ranges: required for backfill_offsets, e\.g\."):
        parse_request({"action": BACKFILL_OFFSETS, "reason": "r", "offset_ranges": []}, run_type="manual")


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({"topic": "orders"}, r"offset_ranges: expected a list of \{topic, partition, from, until\}, got \{"),
        (["orders-0"], r"offset_ranges\[0\]: expected an object \{topic, partition, from, until\}, got 'orders-0'"),
        ([{"topic": "orders", "from": 0, "until": 1, "to": 2, "max": 3}],
         r"offset_ranges\[0\]: unknown keys \['max', 'to'\]; expected topic, partition, from, until"),
        ([{"topic": "", "from": 0, "until": 1}], r"offset_ranges\[0\]\.topic: expected a topic name, got ''"),
        ([{"topic": "orders", "from": 0, "until": 1}, {"topic": "orders", "partition": -1, "from": 0, "until": 1}],
         r"offset_ranges\[1\]\.partition: expected a whole number >= 0, got -1"),
        ([{"topic": "orders", "from": True, "until": 1}], r"offset_ranges\[0\]\.from: expected a whole number >= 0, "
                                                          r"got True"),
        ([{"topic": "orders", "from": 0, "until": "9"}], r"offset_ranges\[0\]\.until: expected a whole number >= 0, "
                                                         r"got '9'"),
        ([{"topic": "orders", "from": 0}], r"offset_ranges\[0\]\.until: expected a whole number >= 0, got None"),
        ([{"topic": "orders", "partition": 0, "from": 7, "until": 7}],
         r"offset_ranges\[0\]: from 7 is not below until 7 \(until is exclusive: \[7, 7\) holds no offset\)"),
        ([{"topic": "orders", "partition": 1, "from": 0, "until": 5}, {"topic": "orders", "partition": 1, "from": 5,
                                                                       "until": 9}],
         r"topic 'orders' partition 1 is given twice; give each partition one range"),
        ([{"topic": "orders", "from": 0, "until": 5}, {"topic": "orders", "partition": 2, "from": 0, "until": 9}],
         r"topic 'orders' partition 2 is given twice"),
        ([{"topic": "orders", "from": 0, "until": 5}, {"topic": "orders", "from": 6, "until": 9}],
         r"topic 'orders' all partitions is given twice"),
    ],
    ids=["not-a-list", "not-an-object", "unknown-keys", "empty-topic", "negative-partition", "bool-from",
         "string-until", "missing-until", "empty-range", "same-partition-twice", "partition-and-all",
         "all-twice"],
)  # fmt: skip
def test_malformed_offset_ranges_name_the_item_and_key(ranges, message):
    with pytest.raises(RequestError, match=message):
        parse_request({"action": BACKFILL_OFFSETS, "reason": "r", "offset_ranges": ranges}, run_type="manual")


def test_offset_ranges_are_bounded_and_checked_for_duplicates_in_one_pass():
    many = [{"topic": "orders", "partition": p, "from": 0, "until": 1} for p in range(1001)]
    with pytest.raises(RequestError, match=r"offset_ranges: at most 1000 ranges, got 1001; leave partition out"):
        parse_request({"action": BACKFILL_OFFSETS, "reason": "r", "offset_ranges": many}, run_type="manual")
    # the last of 1,000 partitions given twice is found (the check was quadratic in the ranges)
    twice = many[:999] + [{"topic": "orders", "partition": 0, "from": 5, "until": 9}]
    with pytest.raises(RequestError, match=r"topic 'orders' partition 0 is given twice"):
        parse_request({"action": BACKFILL_OFFSETS, "reason": "r", "offset_ranges": twice}, run_type="manual")
    assert len(offsets_request(*many[:1000]).offset_ranges) == 1000


@pytest.mark.parametrize("key", ["reason", "quarantine_reason"])
def test_a_reason_on_more_than_one_line_is_refused_so_it_cannot_forge_a_log_line(key):
    params = {"action": "replay_quarantine", "reason": "fixed", key: "ok\nSUMMARY record_run: success; forged"}
    with pytest.raises(RequestError, match=rf"{key}: expected one line of text, got a control character '\\n'"):
        parse_request(params, run_type="manual")


def test_same_partition_of_two_topics_is_not_a_duplicate():
    request = offsets_request({"topic": "orders", "partition": 0, "from": 0, "until": 5},
                              {"topic": "payments", "partition": 0, "from": 0, "until": 5})  # fmt: skip
    assert [(r.topic, r.partition) for r in request.offset_ranges] == [("orders", 0), ("payments", 0)]


@pytest.mark.parametrize("missing", ["from_time", "to_time"])
def test_backfill_time_needs_both_times(missing):
    params = {"action": BACKFILL_TIME, "reason": "r", "from_time": "2026-11-20T00:00:00Z",
              "to_time": "2026-11-21T00:00:00Z"}  # fmt: skip
    params[missing] = ""
    with pytest.raises(RequestError, match=r"from_time and to_time: both required for backfill_time"):
        parse_request(params, run_type="manual")


def test_backfill_time_from_must_be_before_to():
    with pytest.raises(RequestError, match=r"from_time 2026-11-21T00:00:00\+00:00 is not before to_time "
                                           r"2026-11-21T00:00:00\+00:00 \(to_time is exclusive\)"):  # fmt: skip
        parse_request({"action": BACKFILL_TIME, "reason": "r", "from_time": "2026-11-21T00:00:00Z",
                       "to_time": "2026-11-21T00:00:00+00:00"}, run_type="manual")  # fmt: skip


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2026-11-20T00:00:00", r"from_time: '2026-11-20T00:00:00' has no time zone; add one \(e\.g\. \+00:00 or Z\)"),
        ("yesterday", r"from_time: expected an ISO 8601 date-time with a time zone \(e\.g\. .*\), got 'yesterday'"),
        (1763596800, r"from_time: expected an ISO 8601 date-time with a time zone, got 1763596800"),
    ],
    ids=["naive", "not-a-date", "epoch-number"],
)
def test_bad_timestamps_name_the_param(value, message):
    with pytest.raises(RequestError, match=message):
        parse_request({"action": BACKFILL_TIME, "reason": "r", "from_time": value,
                       "to_time": "2026-11-21T00:00:00Z"}, run_type="manual")  # fmt: skip


def test_airflow_backfill_run_re_reads_its_data_interval():
    request = parse_request({"action": NORMAL, "offset_ranges": [], "from_time": None}, run_type="backfill",
                            data_interval=(T0, T1), requested_by="bob")  # fmt: skip
    assert request == RunRequest(AIRFLOW_BACKFILL, "airflow backfill", "bob", (), T0, T1)
    assert request.is_backfill
    assert request.describe() == ("airflow_backfill [2026-11-20T00:00:00+00:00, 2026-11-21T00:00:00+00:00) "
                                  "by bob: airflow backfill")  # fmt: skip


def test_airflow_backfill_keeps_a_given_reason():
    request = parse_request({"reason": "re-run November"}, run_type="backfill", data_interval=(T0, T1))
    assert (request.action, request.reason) == (AIRFLOW_BACKFILL, "re-run November")


@pytest.mark.parametrize(
    ("params", "got"),
    [
        ({"action": BACKFILL_TIME, "reason": "r"}, "backfill_time"),
        ({"offset_ranges": [{"topic": "orders", "from": 0, "until": 1}]}, "normal"),
        ({"from_time": "2026-11-20T00:00:00Z"}, "normal"),
    ],
    ids=["action", "offset-ranges", "from-time"],
)
def test_airflow_backfill_refuses_manual_params(params, got):
    with pytest.raises(RequestError, match=rf"`airflow backfill create`.*leave action at 'normal' and the backfill "
                                           rf"params empty \(got action '{got}'\)"):  # fmt: skip
        parse_request(params, run_type="backfill", data_interval=(T0, T1))


@pytest.mark.parametrize("interval", [None, (None, None), (T0, None), (T1, T0), (T0, T0)],
                         ids=["none", "both-none", "no-end", "reversed", "empty"])  # fmt: skip
def test_airflow_backfill_needs_a_data_interval(interval):
    with pytest.raises(RequestError, match=r"this backfill run has no data interval to re-read \(got .* to .*\); "
                                           r"the DAG's timetable must give each run an interval"):  # fmt: skip
        parse_request({}, run_type="backfill", data_interval=interval)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"actoin": "backfill_offsets"}, r"^'actoin': not a param of this DAG's trigger form \(did you mean 'action'\?\); "
                                         r"the form takes action, reason, offset_ranges, from_time, to_time, quarantine_reason, "
                                         r"quarantine_field, quarantine_route, dry_run$"),
        ({"action": "normal", "zzz": 1}, r"^'zzz': not a param of this DAG's trigger form; the form takes"),
        ({"from": 1, "reasn": "x"}, r"^'from': .*\(also unknown: 'reasn'\)$"),
    ],
    ids=["misspelt-action", "unrelated", "two-unknown"],
)  # fmt: skip
def test_a_conf_key_the_form_does_not_have_is_refused_not_ignored(conf, message):
    with pytest.raises(RequestError, match=message):
        parse_request(conf, run_type="manual")


@pytest.mark.parametrize(
    "params",
    [
        {"action": BACKFILL_OFFSETS, "reason": "r", "offset_ranges": [{"topic": "orders", "from": 0, "until": 5}]},
        {"action": BACKFILL_TIME, "reason": "r", "from_time": "2026-11-20T00:00:00Z", "to_time": "2026-11-21T00:00:00Z"},
        {"action": "replay_quarantine", "reason": "r", "quarantine_field": "currency"},
    ],
    ids=["offsets", "time", "replay"],
)  # fmt: skip
def test_backfills_and_replays_take_a_dry_run_and_say_so(params):
    request = parse_request({**params, "dry_run": True}, run_type="manual", requested_by="alice")
    assert request.dry_run is True
    assert request.describe().startswith(f"dry run of {params['action']}")
    assert parse_request(params, run_type="manual").dry_run is False


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dry_run": True}, r"^dry_run: backfill_offsets, backfill_time, replay_quarantine have a dry run, not "
                            r"'normal'; clear dry_run to run it$"),
        ({"action": "acknowledge_gap", "reason": "r", "dry_run": True}, r"not 'acknowledge_gap'"),
        ({"action": "replay_quarantine", "reason": "r", "dry_run": "yes"}, r"^dry_run: expected true or false, got "
                                                                            r"'yes'$"),
    ],
    ids=["normal", "acknowledge-gap", "not-a-flag"],
)  # fmt: skip
def test_a_dry_run_of_an_action_without_one_is_refused(params, message):
    with pytest.raises(RequestError, match=message):
        parse_request(params, run_type="manual")


def test_an_airflow_backfill_run_has_no_dry_run():
    with pytest.raises(RequestError, match=r"`airflow backfill create`"):
        parse_request({"dry_run": True}, run_type="backfill", data_interval=(T0, T1))


# --------------------------------------------------------------------------- form_params


def test_form_params_accept_their_defaults():
    params = form_params()
    assert set(params) == {"action", "reason", "offset_ranges", "from_time", "to_time", "quarantine_reason",
                           "quarantine_field", "quarantine_route", "dry_run"} == set(FORM_KEYS)  # fmt: skip
    assert all(isinstance(p, Param) for p in params.values())
    assert {name: p.resolve() for name, p in params.items()} == {
        "action": NORMAL, "reason": "", "offset_ranges": [], "from_time": None, "to_time": None,
        "quarantine_reason": "", "quarantine_field": "", "quarantine_route": "", "dry_run": False,
    }  # fmt: skip
    assert params["action"].schema["enum"] == list(ACTIONS)
    assert AIRFLOW_BACKFILL not in params["action"].schema["enum"]  # only `airflow backfill create` makes those


def test_form_params_accept_valid_values():
    params = form_params()
    ranges = [{"topic": "orders", "partition": 0, "from": 0, "until": 100}, {"topic": "payments", "partition": None,
                                                                             "from": 3, "until": 4}]  # fmt: skip
    assert params["offset_ranges"].resolve(ranges) == ranges
    assert params["action"].resolve(BACKFILL_TIME) == BACKFILL_TIME
    assert params["from_time"].resolve("2026-11-20T00:00:00+00:00") == "2026-11-20T00:00:00+00:00"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("action", "delete", r"'delete' is not one of \['normal', 'backfill_offsets'"),
        ("action", AIRFLOW_BACKFILL, r"'airflow_backfill' is not one of"),
        ("reason", "x" * 501, r"is too long"),
        ("offset_ranges", [{"topic": "orders", "from": 0, "until": 1, "to": 2}], r"'to' was unexpected"),
        ("offset_ranges", [{"topic": "orders", "from": 0}], r"'until' is a required property"),
        ("offset_ranges", [{"topic": "orders", "from": -1, "until": 1}], r"-1 is less than the minimum of 0"),
        ("offset_ranges", [{"topic": "orders", "from": 0, "until": 0}], r"0 is less than the minimum of 1"),
        ("offset_ranges", [{"topic": "", "from": 0, "until": 1}], r"'' should be non-empty|'' is too short"),
        ("to_time", 5, r"5 is not of type 'null', 'string'"),
    ],
    ids=["unknown-action", "airflow-backfill-action", "long-reason", "unknown-key", "no-until", "negative-from",
         "zero-until", "empty-topic", "number-time"],
)  # fmt: skip
def test_airflow_validation_rejects_bad_form_values(name, value, message):
    with pytest.raises(ParamValidationError, match=message):
        form_params()[name].resolve(value)


# --------------------------------------------------------------------------- plan_offsets_backfill


def test_offsets_plan_of_one_partition():
    plan = plan_offsets({"topic": "orders", "partition": 0, "from": 20, "until": 180})
    assert plan.ranges == (BackfillRange("orders", 0, 20, 180),)
    assert plan.offsets == 160
    assert plan.notes == ()


def test_offsets_plan_of_all_partitions_is_sorted():
    plan = plan_offsets({"topic": "payments", "from": 5, "until": 40},
                        {"topic": "orders", "partition": 1, "from": 0, "until": 100})  # fmt: skip
    assert plan.ranges == (BackfillRange("orders", 1, 0, 100), BackfillRange("payments", 0, 5, 40),
                           BackfillRange("payments", 1, 5, 40))  # fmt: skip
    assert plan.offsets == 100 + 35 + 35


def test_offsets_plan_may_reach_the_table_and_kafka_edges_exactly():
    plan = plan_offsets({"topic": "orders", "partition": 0, "from": 10, "until": 180},
                        {"topic": "payments", "partition": 0, "from": 0, "until": 50})  # fmt: skip
    assert [(r.topic, r.partition, r.from_offset, r.until_offset) for r in plan.ranges] == [
        ("orders", 0, 10, 180), ("payments", 0, 0, 50)]  # fmt: skip


def test_unknown_topic_lists_the_pipelines_topics():
    assert refusal({"topic": "refunds", "partition": 0, "from": 0, "until": 5}) == (
        "backfill by offsets refused:\n  - offset_ranges[0]: topic 'refunds' is not one pipeline 'orders' has "
        "ingested (its topics: orders, payments)"
    )


def test_topic_gone_from_kafka_is_refused():
    kafka = {"orders": KAFKA["orders"]}
    assert refusal({"topic": "payments", "partition": 0, "from": 0, "until": 5}, kafka=kafka).endswith(
        "offset_ranges[0]: topic 'payments' does not exist in Kafka now")


def test_unknown_partition_lists_the_topics_partitions():
    assert refusal({"topic": "orders", "partition": 7, "from": 0, "until": 5}).endswith(
        "offset_ranges[0]: topic 'orders' has no partition 7 (it has partitions 0, 1, 2)")


def test_from_below_earliest_names_what_kafka_holds():
    assert refusal({"topic": "orders", "partition": 0, "from": 5, "until": 50}).endswith(
        "offset_ranges[0]: partition orders-0 from 5 is below Kafka's earliest offset 10 (older records were "
        "deleted by retention); Kafka holds offsets [10, 200)")


def test_from_below_earliest_of_an_empty_partition():
    kafka = {"orders": TopicState("orders", "id", {0: PartitionState(180, 180)})}
    assert refusal({"topic": "orders", "partition": 0, "from": 100, "until": 150}, kafka=kafka).endswith(
        "partition orders-0 from 100 is below Kafka's earliest offset 180 (older records were deleted by "
        "retention); Kafka holds no records now")


def test_until_past_kafkas_end_is_refused():
    assert refusal({"topic": "orders", "partition": 1, "from": 0, "until": 151}).endswith(
        "offset_ranges[0]: partition orders-1 until 151 is past Kafka's end 150; Kafka holds offsets [0, 150)")


def test_until_past_the_tables_next_offset_says_what_may_be_re_read():
    assert refusal({"topic": "orders", "partition": 0, "from": 20, "until": 181}).endswith(
        "offset_ranges[0]: partition orders-0 until 181 is past the table's next offset 180; offsets from 180 on "
        "are read by the next normal run, so a backfill may re-read [10, 180) at most")


def test_partition_not_ingested_yet_is_refused():
    assert refusal({"topic": "orders", "partition": 2, "from": 0, "until": 10}).endswith(
        "offset_ranges[0]: partition orders-2 has not been ingested yet; the next normal run reads it")


def test_all_partitions_of_a_topic_leave_a_partition_not_ingested_yet_to_the_normal_run():
    plan = plan_offsets({"topic": "orders", "from": 10, "until": 100})
    assert [(r.partition, r.from_offset, r.until_offset) for r in plan.ranges] == [(0, 10, 100), (1, 10, 100)]
    assert plan.notes == ("orders-2 has not been ingested yet and is left to the next normal run",)


def test_every_problem_is_reported_at_once():
    message = refusal(
        {"topic": "orders", "partition": 0, "from": 5, "until": 50},
        {"topic": "orders", "partition": 1, "from": 0, "until": 120},
        {"topic": "payments", "partition": 0, "from": 0, "until": 10},  # fine on its own
        {"topic": "refunds", "from": 0, "until": 1},
    )
    lines = message.split("\n  - ")
    assert lines[0] == "backfill by offsets refused:"
    assert [line.split(":")[0] for line in lines[1:]] == ["offset_ranges[0]", "offset_ranges[1]", "offset_ranges[3]"]
    assert "orders-0 from 5 is below Kafka's earliest offset 10" in lines[1]
    assert "orders-1 until 120 is past the table's next offset 100" in lines[2]
    assert "topic 'refunds' is not one pipeline 'orders' has ingested" in lines[3]


@pytest.mark.parametrize("table", [None, {}], ids=["none", "empty"])
def test_offsets_backfill_without_table_progress_is_refused(table):
    with pytest.raises(RequestError, match=r"pipeline 'orders' has not ingested anything yet; a backfill re-reads "
                                           r"what the table has passed\. Run it normally first"):  # fmt: skip
        plan_offsets({"topic": "orders", "partition": 0, "from": 20, "until": 30}, table=table)


def test_until_past_table_behind_retention_does_not_offer_an_inverted_range():
    kafka = {"orders": TopicState("orders", "id", {0: PartitionState(50, 100)})}
    message = refusal({"topic": "orders", "partition": 0, "from": 60, "until": 70}, kafka=kafka,
                      table={"orders": {0: 30}})  # fmt: skip
    assert "orders-0 until 70 is past the table's next offset 30" in message
    assert "[50, 30)" not in message


# --------------------------------------------------------------------------- plan_time_backfill


def plan_time(request=None, *, start, end, table=TABLE, kafka=KAFKA, earliest_times=None):
    return plan_time_backfill(request or time_request(), pipeline="orders", kafka=kafka, table_next=table,
                              start_offsets=start, end_offsets=end, earliest_times=earliest_times)  # fmt: skip


def test_time_plan_reads_from_start_to_end_offsets_capped_at_the_table():
    plan = plan_time(
        start={("orders", 0): 20, ("orders", 1): 90, ("orders", 2): 0, ("payments", 0): 10, ("payments", 1): None},
        end={("orders", 0): 60, ("orders", 1): None, ("orders", 2): 10, ("payments", 0): 10, ("payments", 1): None},
    )  # fmt: skip
    # orders-1: no record at to_time yet -> Kafka's end 150, capped at the table's 100; orders-2 not ingested;
    # payments-0: empty window; payments-1: no record after from_time.
    assert plan.ranges == (BackfillRange("orders", 0, 20, 60), BackfillRange("orders", 1, 90, 100))
    assert plan.notes == ("orders-1: records from offset 100 on are not ingested yet; the next normal run reads them",)
    assert plan.offsets == 50


def test_time_plan_notes_a_topic_gone_from_kafka():
    plan = plan_time(start={("orders", 0): 20}, end={("orders", 0): 30}, kafka={"orders": KAFKA["orders"]})
    assert plan.ranges == (BackfillRange("orders", 0, 20, 30),)
    assert plan.notes == ("topic 'payments' no longer exists in Kafka; nothing of it can be re-read",)


def test_time_window_past_the_table_is_allowed_empty_for_airflow_backfill():
    plan = plan_time(time_request(AIRFLOW_BACKFILL), start={("orders", 0): 185}, end={("orders", 0): None})
    assert plan.ranges == ()
    assert plan.offsets == 0
    assert plan.notes == ("orders-0: records from offset 180 on are not ingested yet; the next normal run reads "
                          "them",)  # fmt: skip


def test_empty_time_plan_for_backfill_time_lists_each_partitions_holdings():
    first = {("orders", 0): datetime(2026, 11, 22, 8, tzinfo=UTC), ("orders", 1): None}
    with pytest.raises(RequestError) as info:
        plan_time(start={}, end={}, earliest_times=first)
    assert str(info.value) == (
        "backfill by time refused: no record the table has passed has a Kafka timestamp in "
        "[2026-11-20T00:00:00+00:00, 2026-11-21T00:00:00+00:00).\n"
        "  - orders-0: Kafka holds offsets [10, 200), first record at 2026-11-22T08:00:00+00:00, table at 180\n"
        "  - orders-1: Kafka holds offsets [0, 150), table at 100\n"
        "  - orders-2: Kafka holds offsets [0, 50), table at None\n"
        "  - payments-0: Kafka holds offsets [0, 50), table at 50\n"
        "  - payments-1: Kafka holds offsets [5, 60), table at 40"
    )


@pytest.mark.parametrize("action", [BACKFILL_TIME, AIRFLOW_BACKFILL])
@pytest.mark.parametrize("table", [None, {}], ids=["none", "empty"])
def test_time_backfill_without_table_progress_is_refused(action, table):
    with pytest.raises(RequestError, match=r"pipeline 'orders' has not ingested anything yet"):
        plan_time(time_request(action), start={("orders", 0): 0}, end={}, table=table)


def test_empty_time_plan_of_a_vanished_topic_names_the_topic():
    with pytest.raises(RequestError) as info:
        plan_time(start={}, end={}, table={"orders": {0: 180}}, kafka={})
    assert "'orders' no longer exists in Kafka" in str(info.value)


def test_every_hint_names_an_action_of_the_form_with_the_exact_command():
    import json
    import re

    from include.contract.actions import ACTIONS, action_hint

    for action in ACTIONS:
        hint = action_hint("orders", action, "disk was full")
        conf = re.search(r"airflow dags trigger orders -c '(.+)'\)$", hint)
        assert conf is not None and json.loads(conf.group(1)) == {"action": action, "reason": "disk was full"}
        assert f"action {action!r}" in hint
    with pytest.raises(ValueError, match="unknown trigger-form action 'rebuild'"):
        action_hint("orders", "rebuild")


def test_replay_quarantine_takes_a_selection_and_refuses_its_params_elsewhere():
    request = parse_request({"action": "replay_quarantine", "reason": "currency GBP allowed now",
                             "quarantine_reason": "currency:", "quarantine_field": "currency",
                             "from_time": T0.isoformat()}, run_type="manual")  # fmt: skip
    assert request.replay == ReplaySelection("currency:", "currency", T0, None)
    assert request.describe() == (
        "replay_quarantine of quarantined records not replayed yet with reason containing 'currency:' and a "
        f"problem in field 'currency' and Kafka timestamps in [{T0.isoformat()}, the last): "
        "currency GBP allowed now"
    )
    everything = parse_request({"action": "replay_quarantine", "reason": "fixed"}, run_type="manual")
    assert everything.replay == ReplaySelection()
    with pytest.raises(RequestError, match=r"^reason: required for action 'replay_quarantine'"):
        parse_request({"action": "replay_quarantine"}, run_type="manual")
    with pytest.raises(RequestError, match=r"quarantine_reason/quarantine_field/quarantine_route are set but action is 'normal'"):
        parse_request({"quarantine_field": "currency"}, run_type="manual")
    with pytest.raises(RequestError, match=r"is not before to_time"):
        parse_request({"action": "replay_quarantine", "reason": "x", "from_time": T1.isoformat(),
                       "to_time": T0.isoformat()}, run_type="manual")  # fmt: skip


def test_replay_quarantine_takes_a_route_by_name_and_only_for_a_replay():
    request = parse_request({"action": "replay_quarantine", "reason": "fixed", "quarantine_route": " payments "},
                            run_type="manual")  # fmt: skip
    assert request.replay == ReplaySelection(route="payments")
    assert request.describe() == "replay_quarantine of quarantined records of route 'payments' not replayed yet: fixed"
    assert ReplaySelection.from_json(request.replay.to_json()) == request.replay
    with pytest.raises(RequestError, match=r"^quarantine_route: expected a route's name \(\[a-z\]"):
        parse_request({"action": "replay_quarantine", "reason": "x", "quarantine_route": "Pay/../x"}, run_type="manual")
    with pytest.raises(RequestError, match=r"quarantine_reason/quarantine_field/quarantine_route are set but action "
                                           r"is 'backfill_time'"):  # fmt: skip
        parse_request({"action": BACKFILL_TIME, "reason": "x", "from_time": T0.isoformat(), "to_time": T1.isoformat(),
                       "quarantine_route": "orders"}, run_type="manual")  # fmt: skip



# --------------------------------------------------------------------------- skip_offsets


def _skip(*ranges: dict) -> RunRequest:
    return parse_request({"action": SKIP_OFFSETS, "reason": "INC-7: poison at 100", "offset_ranges": list(ranges)},
                         run_type="manual", requested_by="alice")  # fmt: skip


def test_skip_offsets_records_gaps_from_where_ingest_stands_with_who_and_why():
    gaps = plan_skip(_skip({"topic": "orders", "partition": 1, "from": 100, "until": 102},
                           {"topic": "payments", "partition": 1, "from": 40, "until": 60}), table_next=TABLE, kafka=KAFKA)
    assert [(g.topic, g.partition, g.from_offset, g.until_offset) for g in gaps] == [
        ("orders", 1, 100, 102), ("payments", 1, 40, 60)]  # fmt: skip
    assert {g.reason for g in gaps} == {"skipped at ingest by alice: INC-7: poison at 100"}


@pytest.mark.parametrize(("item", "message"), [
    ({"topic": "orders", "partition": 1, "from": 101, "until": 102},
     "offset_ranges[0] orders-1: from is 101, but ingest stands at offset 100 on this partition; skip from 100"),
    ({"topic": "orders", "partition": 1, "from": 100, "until": 151},
     "offset_ranges[0] orders-1: until is 151, past what Kafka holds (offsets up to 150, exclusive)"),
    ({"topic": "orders", "partition": 2, "from": 0, "until": 1},
     "offset_ranges[0] orders-2: the table has read nothing of this partition yet"),
    ({"topic": "orders", "partition": 9, "from": 0, "until": 1}, "offset_ranges[0] orders-9: Kafka has no such partition"),
])  # fmt: skip
def test_skip_offsets_refuses_a_range_that_is_not_where_ingest_stands(item, message):
    with pytest.raises(RequestError) as info:
        plan_skip(_skip(item), table_next=TABLE, kafka=KAFKA)
    assert message in str(info.value)


def test_skip_offsets_needs_ranges_of_one_partition_each():
    with pytest.raises(RequestError, match="offset_ranges: required for skip_offsets"):
        parse_request({"action": SKIP_OFFSETS, "reason": "r"}, run_type="manual")
    with pytest.raises(RequestError, match="skips records of one partition at a time; give the partition of topic"):
        _skip({"topic": "orders", "from": 0, "until": 1})


def test_every_action_is_one_spec_of_the_registry_and_the_form_offers_those_in_form():
    from include.contract.actions import REGISTRY, spec

    assert list(ACTIONS) == [name for name, s in REGISTRY.items() if s.in_form]
    assert form_params()["action"].schema["enum"] == list(ACTIONS)
    assert spec(AIRFLOW_BACKFILL).backfill and not spec(AIRFLOW_BACKFILL).in_form
    assert [n for n, s in REGISTRY.items() if s.backfill] == [BACKFILL_OFFSETS, BACKFILL_TIME, AIRFLOW_BACKFILL]
    with pytest.raises(ValueError, match="no such action"):
        spec("rebuild")


def test_the_plan_handoff_reads_back_what_it_wrote_and_an_older_runs_plain_dict():
    from include.contract.handoffs import RequestPlan

    plan = RequestPlan(BACKFILL_OFFSETS, "replay", "ann", "d", ({"topic": "t"},), None, ("n",), 5, lock_epoch=3)
    assert RequestPlan.from_xcom(plan.to_xcom()) == plan and plan.is_backfill
    older = {"action": SKIP_OFFSETS, "reason": "x", "skip": [{"topic": "t", "partition": 0, "from": 1, "until": 2}]}
    assert RequestPlan.from_xcom(older).skip == (OffsetRequest("t", 0, 1, 2),)
    assert RequestPlan.from_xcom(None).action == NORMAL
