"""Stand-ins shared by unit tests (their fixtures are in tests/conftest.py)."""

from __future__ import annotations

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
