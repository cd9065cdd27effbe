"""A dry run's report (:mod:`include.contract.dry_run`): the arithmetic per range, the estimate, the texts.

Pure. The report against a real broker, bronze table and ledger, and the real
run after it, is ``tests/integration/test_pipeline_dag.py``'s dry-run test.
"""

from __future__ import annotations

import pytest

from include.contract.dry_run import DryRunReport, Estimate, RangeDryRun, estimate, ranges_against


def test_a_range_counts_what_kafka_holds_what_bronze_has_and_what_a_backfill_would_insert():
    r = RangeDryRun("orders", 1, 0, 20, earliest=5, latest=40, in_bronze=10)
    assert (r.offsets, r.held, r.would_insert) == (20, 15, 5)
    assert r.line() == ("orders-1 [0, 20): 20 offsets, 15 held by Kafka (5 deleted by retention), 10 already in "
                        "bronze, would insert 5")  # fmt: skip
    assert RangeDryRun("orders", 1, 0, 20, 0, 40, 20).line().endswith("20 held by Kafka, 20 already in bronze, "
                                                                       "would insert 0")  # fmt: skip
    # Nothing held at all: nothing to insert, whatever bronze has.
    assert RangeDryRun("orders", 1, 0, 20, 30, 40, 0).would_insert == 0
    got = ranges_against([{"topic": "orders", "partition": 1, "from": 0, "until": 20}], {("orders", 1): (5, 40)},
                         {("orders", 1): 10})  # fmt: skip
    assert got == (r,)


def test_the_estimate_fits_a_fixed_cost_and_a_rate_to_runs_of_different_sizes():
    runs = [{"outcome": "success", "rows": rows, "duration_s": 30 + rows / 1000} for rows in (1_000, 5_000, 20_000)]
    runs += [{"outcome": "failed", "rows": 9, "duration_s": 999.0}, {"outcome": "skipped", "rows": 0,
                                                                     "duration_s": 2.0}]  # fmt: skip
    seconds, basis = estimate(runs, 100_000)
    assert seconds == pytest.approx(130.0)
    assert basis == "3 recent runs: 30 s fixed, 1,000 records/s"


@pytest.mark.parametrize("sizes", [(), (1_000,), (1_000, 1_000)])
def test_no_estimate_from_runs_of_one_size_and_the_basis_says_why(sizes):
    runs = [{"outcome": "success", "rows": n, "duration_s": 40.0} for n in sizes]
    seconds, basis = estimate(runs, 100_000)
    assert seconds is None
    assert basis == (f"the ledger's last 20 runs hold {len(sizes)} successful run(s) that read records, of "
                     f"{len(set(sizes))} size(s); an estimate needs two sizes at least")  # fmt: skip


def test_the_summary_of_a_backfill_a_replay_and_a_refusal():
    ranges = (RangeDryRun("orders", 0, 0, 10, 0, 50, 10), RangeDryRun("orders", 1, 0, 20, 0, 50, 15))
    backfill = DryRunReport("backfill_offsets", ranges=ranges,
                            estimate=Estimate(95.0, "3 recent runs: 30 s fixed, 1,000 records/s", "local[2] in the "
                                              "driver: backlog 30 records <= cluster.local_max_records 100"))  # fmt: skip
    assert backfill.summary() == (
        "dry run of backfill_offsets: would insert 5 records into bronze: 2 range(s) of 30 offsets, 30 held by "
        "Kafka, 25 already in bronze; about 2 min (3 recent runs: 30 s fixed, 1,000 records/s); local[2] in the "
        "driver: backlog 30 records <= cluster.local_max_records 100")  # fmt: skip
    data = backfill.to_json()
    assert (data["would_insert"], data["estimate_s"], data["summary"]) == (5, 95.0, backfill.summary())
    assert [r["would_insert"] for r in data["ranges"]] == [0, 5]

    replay = DryRunReport("replay_quarantine", replay={"rows": 7, "reasons": {"currency: bad": 5, "amount: bad": 2}},
                          estimate=Estimate(None, "too few runs"))  # fmt: skip
    assert replay.summary() == ("dry run of replay_quarantine: would replay 7 quarantined records; no time estimate "
                                "(too few runs)")  # fmt: skip
    assert replay.lines() == ["5 quarantined with reason: currency: bad", "2 quarantined with reason: amount: bad"]
    assert replay.to_json()["would_insert"] is None
    routed = DryRunReport("replay_quarantine", replay={"rows": 3, "reasons": {}, "route": "payments"})
    assert routed.summary() == "dry run of replay_quarantine: would replay 3 quarantined records of route 'payments'"

    refused = DryRunReport("backfill_offsets", refused="backfill by offsets refused:\n  - offset_ranges[0]: ...")
    assert refused.summary() == ("dry run of backfill_offsets: the run would be refused: backfill by offsets "
                                 "refused:\n  - offset_ranges[0]: ...")  # fmt: skip
    assert refused.to_json()["refused"].startswith("backfill by offsets refused")
