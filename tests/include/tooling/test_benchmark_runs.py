"""The DAG-run benchmark's reading of each task's own work from an ``airflow dags test`` log."""

from __future__ import annotations

import pytest

from include.tooling.benchmark_runs import median_range, own_work_seconds
from tests.include.tooling.benchmark_timings import dag_run_timing

API = "[airflow.api_fastapi.execution_api.routes.task_instances]"
# Lines as Airflow 3's execution API logs them in a `dags test` run (correlation ids shortened).
LOG = f"""\
2026-11-24T17:51:28.770106Z [info     ] [DAG TEST] running task <TaskInstance: demo.check_request> [airflow.sdk]
2026-11-24T17:51:32.011006Z [info     ] Task started                   {API} correlation_id=c1 hostname=vm loc=task_instances.py:226 previous_state=queued ti_id=01a20eaf-23d4-75e0-b715-814132265a6c
2026-11-24T17:51:32.012899Z [info     ] Task instance state updated    {API} correlation_id=c1 loc=task_instances.py:254 rows_affected=1 ti_id=01a20eaf-23d4-75e0-b715-814132265a6c
SUMMARY check_request: normal run
2026-11-24T17:51:32.096408Z [info     ] Task instance state updated    {API} correlation_id=c2 loc=task_instances.py:485 new_state=success rows_affected=1 ti_id=01a20eaf-23d4-75e0-b715-814132265a6c
2026-11-24T17:51:32.134849Z [info     ] Task started                   {API} correlation_id=c3 hostname=vm loc=task_instances.py:226 previous_state=queued ti_id=01a20eaf-23d5-792b-a62d-d15e7c3cf929
2026-11-24T17:51:32.500000Z [info     ] Task instance state updated    {API} correlation_id=c4 loc=task_instances.py:485 new_state=up_for_reschedule rows_affected=1 ti_id=01a20eaf-23d5-792b-a62d-d15e7c3cf929
2026-11-24T17:51:37.134849Z [info     ] Task started                   {API} correlation_id=c5 hostname=vm loc=task_instances.py:226 previous_state=scheduled ti_id=01a20eaf-23d5-792b-a62d-d15e7c3cf929
2026-11-24T17:51:37.380708Z [info     ] Task instance state updated    {API} correlation_id=c6 loc=task_instances.py:485 new_state=skipped rows_affected=1 ti_id=01a20eaf-23d5-792b-a62d-d15e7c3cf929
2026-11-24T17:51:38.000000Z [info     ] Task started                   {API} correlation_id=c7 hostname=vm loc=task_instances.py:226 previous_state=queued ti_id=01a20eaf-23d6-0000-0000-000000000000
"""


def test_each_task_runs_from_the_apis_start_to_its_final_state_without_the_servers_own_start():
    own = own_work_seconds(LOG)
    # check_request: 32.011006 -> 32.096408, not from the [DAG TEST] line 3.2 s earlier.
    assert own["01a20eaf23d475e0b715814132265a6c"] == pytest.approx(0.085402)
    # A rescheduled sensor: its first start to its final state, the wait between pokes included.
    assert own["01a20eaf23d5792ba62dd15e7c3cf929"] == pytest.approx(5.245859)
    # A task that started but never reported a final state has no figure (the caller refuses the run).
    assert set(own) == {"01a20eaf23d475e0b715814132265a6c", "01a20eaf23d5792ba62dd15e7c3cf929"}


def test_a_log_without_api_lines_gives_nothing():
    assert own_work_seconds("SUMMARY ingest: 3 rows\nTask started elsewhere\n") == {}


def test_a_report_cell_is_the_median_and_range_or_the_single_value():
    assert median_range([3.0, 1.0, 2.5]) == "2.5 (1.0–3.0)"
    assert median_range([4.04]) == "4.0"
    assert median_range([]) == "—"
    assert median_range([1500.0, 2500.0], "{:,.0f}".format) == "2,000 (1,500–2,500)"


def test_the_benchmarks_counts_must_be_positive_integers_named_in_the_error(capsys):
    from include.tooling.benchmark import build_arg_parser

    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--records", "0"])
    assert "argument --records: expected a positive integer, got 0" in capsys.readouterr().err


def test_side_by_side_runs_show_each_pipelines_end_to_end_per_backlog_and_where_it_ran():
    from include.tooling.benchmark_runs import render_side_by_side_markdown

    local = "no cluster: local[1] in the driver: backlog 1000 records <= cluster.local_max_records 100000"
    cluster = "standalone cluster: backlog 1000 records > cluster.local_max_records 0; cluster.workers 1"
    base = {"check_request": 3.0, "wait_for_lag": 0.2, "ingest": 20.0, "record_run": 0.4}
    runs = [dag_run_timing("defaults 1000", 1, base, local),
            dag_run_timing("defaults 1000", 2, {**base, "ingest": 16.0}, local),
            dag_run_timing("forced 1000", 1, {**base, "start_cluster": 9.0}, cluster)]
    markdown = render_side_by_side_markdown(runs, ["defaults", "forced"], "Title", "Intro.")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines() if line.startswith("| ")]
    assert rows[0] == ["new records a run", "defaults: end to end s", "forced: end to end s"]
    assert rows[1] == ["1,000", "21.6 (19.6–23.6)", "32.6"]
    assert f"- defaults: local mode: {local}" in markdown and f"- forced: cluster: {cluster}" in markdown
    # Each task's own work per pipeline, in the order the tasks ran; Airflow's part is what is left of end to end.
    assert rows[2] == ["task", "defaults", "forced"]
    assert rows[3:8] == [["check_request", "3.0 (3.0–3.0)", "3.0"], ["wait_for_lag", "0.2 (0.2–0.2)", "0.2"],
                         ["ingest", "18.0 (16.0–20.0)", "20.0"], ["record_run", "0.4 (0.4–0.4)", "0.4"],
                         ["start_cluster", "—", "9.0"]]  # fmt: skip
    assert rows[8] == ["Airflow between the tasks", "0.0 (0.0–0.0)", "0.0"]


def test_side_by_side_runs_show_the_transforms_first_batch_by_phase_and_leave_out_a_skipped_replay():
    from dataclasses import replace

    from include.tooling.benchmark_runs import render_side_by_side_markdown

    def batch(seconds: float, decode: float, *, skipped: bool = False) -> dict:
        return {"batch_id": 0, "skipped_replay": skipped, "read": 1000, "duration_s": seconds,
                "phases": {} if skipped else {"read": 0.5, "decode": decode, "silver_write": 1.0}}  # fmt: skip

    base = {"ingest": 20.0}
    runs = [replace(dag_run_timing("defaults 1000", 1, base, None), transform_batches=(batch(6.0, 2.0),)),
            replace(dag_run_timing("defaults 1000", 2, base, None),
                    transform_batches=(batch(0.0, 0.0, skipped=True), batch(4.0, 1.0))),
            dag_run_timing("forced 1000", 1, base, None)]  # fmt: skip
    markdown = render_side_by_side_markdown(runs, ["defaults", "forced"], "Title", "Intro.")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines() if line.startswith("| ")]
    batches = rows[[r[0] for r in rows].index("pipeline"):]
    assert batches[0] == ["pipeline", "records", "batch s", "beyond s", "read s", "decode s", "silver_write s"]
    # beyond: each batch less its read (0.5 s) and silver write (1.0 s), 4.5 and 2.5 s
    assert batches[1] == ["defaults", "1,000", "5.0 (4.0–6.0)", "3.5 (2.5–4.5)", "0.5 (0.5–0.5)", "1.5 (1.0–2.0)",
                          "1.0 (1.0–1.0)"]  # fmt: skip
    assert len(batches) == 2  # the forced pipeline's run reported no transform


def test_a_batch_beyond_reading_and_writing_needs_both_phases_timed():
    from include.tooling.benchmark_runs import beyond_read_and_write

    batch = {"duration_s": 6.0, "phases": {"read": 0.75, "decode": 2.0, "silver_write": 1.25}}
    assert beyond_read_and_write(batch) == 4.0
    # a report of a version whose timer had the read inside decode: no figure rather than a wrong one
    assert beyond_read_and_write({"duration_s": 6.0, "phases": {"decode": 2.0, "silver_commit": 1.0}}) is None


def test_a_tasks_return_value_is_read_from_the_metadata_database(tmp_path):
    import json
    import sqlite3

    from include.tooling.benchmark_runs import read_return_value

    db = tmp_path / "airflow.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE xcom (dag_id TEXT, run_id TEXT, task_id TEXT, key TEXT, value TEXT)")
        conn.executemany("INSERT INTO xcom VALUES (?, ?, ?, ?, ?)", [
            ("d", "r1", "transform", "return_value", json.dumps({"batches": [{"batch_id": 0}]})),
            ("d", "r2", "transform", "return_value", json.dumps(json.dumps({"read": 5}))),
            ("d", "r1", "ingest", "other", json.dumps(1)),
        ])  # fmt: skip
    assert read_return_value(db, "d", "r1", "transform") == {"batches": [{"batch_id": 0}]}
    assert read_return_value(db, "d", "r2", "transform") == {"read": 5}
    assert read_return_value(db, "d", "r1", "ingest") is None


def test_the_crossover_is_the_smallest_backlog_where_the_cluster_beat_local_mode_with_as_many_cores():
    from include.tooling.benchmark_runs import crossover_verdict

    def run(label: str, size: int, seconds: float):
        return dag_run_timing(f"{label} {size}", 1, {"ingest": seconds}, None)

    runs = [run("local[1]", 1000, 20), run("cluster 1", 1000, 30), run("local[1]", 200000, 90),
            run("cluster 1", 200000, 80), run("local[2]", 1000, 20), run("cluster 2", 1000, 31)]
    one, two = crossover_verdict(runs, [("local[1]", "cluster 1"), ("local[2]", "cluster 2")])
    assert one == ("- cluster 1 / local[1], end to end (1,000: 1.50x, 200,000: 0.89x): "
                   "the cluster pays off from 200,000 records a run")
    assert two == ("- cluster 2 / local[2], end to end (1,000: 1.55x): local mode is faster at every backlog "
                   "measured, up to 1,000 records")


def test_the_checks_ratio_is_taken_against_the_first_history_level_when_there_are_two():
    from dataclasses import replace

    from include.tooling.benchmark_runs import CHECK_TASKS, RunParams, render_runs_markdown

    def run(kind: str, commits: int, checks_s: float):
        seconds = {t: checks_s / len(CHECK_TASKS) for t in CHECK_TASKS}
        return replace(dag_run_timing(kind, 1, seconds, None), commits_before=commits, files_before=commits * 6)

    runs = [run("small", 2, 1.0), run("history 10", 10, 1.2), run("history 2000", 2000, 1.5)]
    markdown = render_runs_markdown(runs, RunParams(small_records=1000, history=(10, 2000)))
    rows = [line for line in markdown.splitlines() if line.startswith("| 2000 |")]
    assert len(rows) == 1 and rows[0].endswith("| 12,000 |"), rows  # the data files the checks open
    assert "Checks total at 2000 commits / at 10 commits: **1.25x** (medians)." in markdown
    # One history level: against the small run, as before.
    markdown = render_runs_markdown(runs[::2], RunParams(small_records=1000, history=(2000,)))
    assert "Checks total at 2000 commits / at 2 commits: **1.50x** (medians)." in markdown
