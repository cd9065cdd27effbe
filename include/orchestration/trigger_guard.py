"""A bad trigger config is refused when it is triggered, before a DAG run exists.

Airflow validates each param of the trigger form on its own, against its JSON Schema, and merges
keys it does not know into the run's conf without a word. Rules across params (``reason`` required
unless the action is ``normal``, ``from_time`` before ``to_time``, ``offset_ranges`` only with
``backfill_offsets``) and a misspelt key are not params, so ``POST /api/v2/dags/{id}/dagRuns``
answered 200 and created a run that ``check_request`` then refused, a whole run later.

:class:`TriggerGuard` is an ASGI middleware the project's plugin adds to Airflow's API server. On a
``POST`` that creates a run of a pipeline's DAG, it runs the same pure rules ``check_request`` runs
(:func:`include.contract.manual_ops.parse_request`, which applies the chosen action's
:class:`~include.contract.actions.ActionSpec`) on the body's ``conf`` and answers 400 with their message; every other request, and every run it lets through, goes on untouched. The UI's
trigger form posts to the same endpoint.

Not covered, and still refused by ``check_request`` when the run starts: ``airflow dags trigger``
and ``airflow dags test -c`` (they write to the metadata database, not through the API server), and
what needs Kafka or the table (a partition that does not exist, a range beyond the table).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from include import settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: ``POST`` here creates a DAG run (``~`` is Airflow's "every DAG", used by list queries, never by a trigger).
TRIGGER_PATH = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/~][^/]*)/dagRuns/?$")
#: A body larger than this is passed on unread: Airflow answers for it, and check_request still checks it.
MAX_BODY_BYTES = 1 << 20


def trigger_refusal(dag_id: str, body: bytes, pipeline_names: Callable[[], set[str]]) -> str | None:
    """Why a request to create a run of ``dag_id`` with ``body`` must be refused, or ``None`` to let it through.

    ``pipeline_names`` gives the DAG ids of the pipelines (other DAGs are not this project's to check).
    A body that is not a JSON object with a ``conf`` object is left to Airflow's own validation.
    """
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return None
    conf = request.get("conf") if isinstance(request, dict) else None
    if conf is None:
        conf = {}
    if not isinstance(conf, dict) or dag_id not in pipeline_names():
        return None
    from include.contract import manual_ops
    from include.contract.actions import RequestError

    try:
        manual_ops.parse_request(conf, run_type="manual")
    except RequestError as exc:
        return f"pipeline {dag_id!r}: the run's params were refused, and no run was created: {exc}"
    return None


class PipelineNames:
    """The names of the valid pipelines in the pipelines folder, loaded again only when a file changes."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder
        self._seen: tuple[tuple[str, int], ...] | None = None
        self._names: set[str] = set()

    def __call__(self) -> set[str]:
        from include.config import load_pipelines

        folder = self._folder or settings.pipelines_dir()
        try:
            listing = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir()
                                   if p.suffix in (".yaml", ".yml")))  # fmt: skip
        except OSError:
            return set()
        if listing != self._seen:
            configs, _ = load_pipelines(folder)
            self._names, self._seen = set(configs), listing
        return self._names


class TriggerGuard:
    """ASGI middleware: refuses, with 400 and the rule's message, a run of a pipeline's DAG whose conf
    :func:`trigger_refusal` refuses (see the module's docstring)."""

    def __init__(self, app: ASGIApp, pipeline_names: Callable[[], set[str]] | None = None) -> None:
        self.app = app
        self.pipeline_names = pipeline_names or PipelineNames()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = TRIGGER_PATH.match(scope.get("path", "")) if scope.get("type") == "http" else None
        if match is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body") or size > MAX_BODY_BYTES:
                break
        refusal = None
        if size <= MAX_BODY_BYTES:
            body = b"".join(m.get("body", b"") for m in messages)
            refusal = trigger_refusal(urllib.parse.unquote(match["dag_id"]), body, self.pipeline_names)
        if refusal is not None:
            await _answer(send, 400, {"detail": refusal})
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})
