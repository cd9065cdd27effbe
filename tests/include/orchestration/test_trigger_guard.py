"""The check at trigger time: the pure rules of check_request on a trigger request's conf, as ASGI middleware."""

from __future__ import annotations

import asyncio
import json

import pytest

from include.orchestration.trigger_guard import PipelineNames, TriggerGuard, trigger_refusal

PIPELINES = {"orders"}


def _names() -> set[str]:
    return PIPELINES


@pytest.mark.parametrize(("conf", "words"), [
    ({"actoin": "rebuild_checkpoint"}, ["'actoin': not a param", "did you mean 'action'?"]),
    ({"action": "rebuild_checkpoint"}, ["reason: required for action 'rebuild_checkpoint'"]),
    ({"action": "backfill_time", "reason": "r", "from_time": "2026-03-02T00:00:00Z", "to_time": "2026-03-01T00:00:00Z"},
     ["from_time 2026-03-02T00:00:00+00:00 is not before to_time"]),
    ({"action": "normal", "offset_ranges": [{"topic": "t", "from": 0, "until": 1}]}, ["offset_ranges is set"]),
])  # fmt: skip
def test_a_conf_check_request_would_refuse_is_refused_naming_the_param_and_the_fix(conf, words):
    refusal = trigger_refusal("orders", json.dumps({"logical_date": None, "conf": conf}).encode(), _names)
    assert refusal is not None and refusal.startswith("pipeline 'orders': the run's params were refused, and no run")
    for word in words:
        assert word in refusal


@pytest.mark.parametrize("body", [
    {"logical_date": None},  # no conf: a normal run
    {"conf": None},
    {"conf": {"action": "rebuild_checkpoint", "reason": "checkpoint folder lost"}},
])  # fmt: skip
def test_a_conf_the_rules_accept_goes_through(body):
    assert trigger_refusal("orders", json.dumps(body).encode(), _names) is None


def test_other_dags_and_bodies_airflow_itself_refuses_are_not_ours_to_answer():
    assert trigger_refusal("someone_elses_dag", b'{"conf": {"actoin": 1}}', _names) is None
    assert trigger_refusal("orders", b"not json", _names) is None  # Airflow answers 422
    assert trigger_refusal("orders", b'{"conf": [1, 2]}', _names) is None


def _call(guard: TriggerGuard, method: str, path: str, body: bytes) -> tuple[list[dict], list[bytes]]:
    sent: list[dict] = []
    seen: list[bytes] = []
    chunks = [{"type": "http.request", "body": body[:5], "more_body": True},
              {"type": "http.request", "body": body[5:], "more_body": False}]  # fmt: skip

    async def receive() -> dict:
        return chunks.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    async def app(scope, receive, send) -> None:
        while True:
            message = await receive()
            seen.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})

    guard.app = app
    asyncio.run(guard({"type": "http", "method": method, "path": path}, receive, send))
    return sent, seen


def test_the_middleware_answers_400_for_a_refused_trigger_and_passes_the_rest_on_with_their_body():
    guard = TriggerGuard(None, pipeline_names=_names)  # type: ignore[arg-type]
    bad = json.dumps({"conf": {"actoin": "x"}}).encode()
    sent, seen = _call(guard, "POST", "/api/v2/dags/orders/dagRuns", bad)
    assert sent[0]["status"] == 400 and seen == []
    assert "did you mean 'action'?" in json.loads(sent[1]["body"])["detail"]

    good = json.dumps({"conf": {}}).encode()
    sent, seen = _call(guard, "POST", "/api/v2/dags/orders/dagRuns", good)
    assert sent[0]["status"] == 200 and b"".join(seen) == good  # the app reads the whole body again
    # a list query of every DAG's runs and a read are never checked
    assert _call(guard, "POST", "/api/v2/dags/~/dagRuns/list", bad)[0][0]["status"] == 200
    assert _call(guard, "GET", "/api/v2/dags/orders/dagRuns", bad)[0][0]["status"] == 200


def test_pipeline_names_are_the_valid_pipelines_and_follow_the_folder(tmp_path, pipeline_file):
    folder = pipeline_file("orders").parent
    names = PipelineNames(folder)
    assert names() == {"orders"}
    pipeline_file("payments")
    assert names() == {"orders", "payments"}
