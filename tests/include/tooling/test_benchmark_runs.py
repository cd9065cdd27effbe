"""The DAG-run benchmark's reading of each task's own work from an ``airflow dags test`` log."""

from __future__ import annotations

import pytest

from include.tooling.benchmark_runs import median_range, own_work_seconds

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


def _timing(kind: str, rep: int, seconds: dict[str, float], choice: str | None):
    from datetime import datetime, timedelta

    from include.tooling.benchmark_runs import DagRunTiming, TaskTiming

    at = datetime(2026, 11, 25, 18, 0, 0)
    tasks = {}
    for task_id, s in seconds.items():
        tasks[task_id] = TaskTiming(task_id, "success", at, at + timedelta(seconds=s))
        at += timedelta(seconds=s)
    return DagRunTiming(kind, rep, 2, 1000, sum(seconds.values()) + 5, tasks, dict(seconds), choice)


def test_the_silver_section_shows_where_each_run_ran_and_its_spark_tasks_apart():
    from include.tooling.benchmark_runs import RunParams, render_runs_markdown

    local = "no cluster: local[1] in the driver: backlog 1000 records <= cluster.local_max_records 10000"
    base = {"check_request": 3.0, "wait_for_lag": 0.2, "preflight": 0.3, "start_cluster": 0.1, "ingest": 20.0,
            "transform": 0.1, "stop_cluster": 0.1, "check_continuity": 0.4, "mirror_offsets": 0.5, "record_run": 0.4}
    runs = [_timing("silver first", 1, base, local), _timing("silver", 1, {**base, "ingest": 18.0}, local),
            _timing("silver", 2, {**base, "ingest": 16.0}, local)]
    markdown = render_runs_markdown(runs, RunParams(small_records=1000))
    assert "## Fixed cost of a DAG run" not in markdown  # that part did not run
    section = markdown.split("## A DAG run through bronze and silver", 1)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]
    assert rows[1][:2] == ["first run (creates the tables)", local]
    assert rows[2][:2] == ["1,000 new events", local]
    # end to end, start_cluster, ingest, transform, the other tasks (the seven Airflow-side ones).
    assert rows[2][3] == "22.1 (21.1–23.1)"
    assert rows[2][4:7] == ["0.1 (0.1–0.1)", "17.0 (16.0–18.0)", "0.1 (0.1–0.1)"]
    assert rows[2][7] == "4.9 (4.9–4.9)"


def test_the_checks_ratio_is_taken_against_the_first_history_level_when_there_are_two():
    from dataclasses import replace

    from include.tooling.benchmark_runs import CHECK_TASKS, RunParams, render_runs_markdown

    def run(kind: str, commits: int, checks_s: float):
        seconds = {t: checks_s / len(CHECK_TASKS) for t in CHECK_TASKS}
        return replace(_timing(kind, 1, seconds, None), commits_before=commits, files_before=commits * 6)

    runs = [run("small", 2, 1.0), run("history 10", 10, 1.2), run("history 2000", 2000, 1.5)]
    markdown = render_runs_markdown(runs, RunParams(small_records=1000, history=(10, 2000)))
    rows = [line for line in markdown.splitlines() if line.startswith("| 2000 |")]
    assert len(rows) == 1 and rows[0].endswith("| 12,000 |"), rows  # the data files the checks open
    assert "Checks total at 2000 commits / at 10 commits: **1.25x** (medians)." in markdown
    # One history level: against the small run, as before.
    markdown = render_runs_markdown(runs[::2], RunParams(small_records=1000, history=(2000,)))
    assert "Checks total at 2000 commits / at 2 commits: **1.50x** (medians)." in markdown
