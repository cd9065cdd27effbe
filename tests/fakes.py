"""Stand-ins shared by unit tests (their fixtures are in tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class FakeTI:
    """What the project's task code uses of an Airflow TaskInstance: XComs by task id, pushes, the try.

    ``xcom_pull(task_ids, key)`` returns ``xcoms[task_ids]`` for the default
    key and ``xcoms[(task_ids, key)]`` for another; ``xcom_push`` records
    into ``pushed``.
    """

    dag_id = "orders"

    def __init__(self, try_number: int = 1, **xcoms: Any) -> None:
        self.try_number = try_number
        self.xcoms: dict[Any, Any] = xcoms
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get(task_ids if key == "return_value" else (task_ids, key))

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def recorded_registry(url: str, answers: Mapping[str, tuple[int, Any]]) -> tuple[Any, list[str]]:
    """A :class:`~include.readers.schema_registry.RegistryClient` of ``url`` that answers from ``answers``
    (full URL -> (HTTP status, JSON body)) instead of the network, and the URLs it asked, in order. A URL not
    recorded answers 404 as Apicurio does. Registry answers are data recorded from the real registry; the
    clients' own tests and the decode tests read them so, and the real registry runs in the integration tests."""
    from include.readers.schema_registry import RegistryClient

    asked: list[str] = []

    def answer(asked_url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        asked.append(asked_url)
        status, body = answers.get(asked_url, (404, {"message": "No content was found.", "error_code": 40403}))
        return status, json.dumps(body).encode()

    return RegistryClient(url, transport=answer), asked
