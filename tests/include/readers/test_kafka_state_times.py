"""kafka_state's lookup of offsets by time, with the admin client faked (the module's other tests use a broker)."""

from __future__ import annotations

import concurrent.futures
from datetime import UTC, datetime
from types import SimpleNamespace

from include.readers import kafka_state


class _Admin:
    """Answers list_offsets with offset 7 for every partition and keeps the timestamps it was asked for."""

    asked: list[int] = []

    def __init__(self, _config) -> None:
        pass

    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *_exc) -> None:
        pass

    def list_offsets(self, specs, **_kwargs):
        futures = {}
        for tp, spec in specs.items():
            _Admin.asked.append(spec.timestamp)
            futures[tp] = concurrent.futures.Future()
            futures[tp].set_result(SimpleNamespace(offset=7))
        return futures


def test_the_time_kafka_is_asked_for_is_the_exact_millisecond_past_2038(monkeypatch):
    monkeypatch.setattr(kafka_state, "AdminClient", _Admin)
    monkeypatch.setattr(_Admin, "asked", [])
    # 2038-04-04T00:40:22.186 is 2153954422186 ms; float seconds times 1000 gave ...185.
    when = datetime(2038, 4, 4, 0, 40, 22, 186000, tzinfo=UTC)
    assert kafka_state.offsets_for_times({"bootstrap.servers": "x:1"}, [("t", 0)], when) == {("t", 0): 7}
    assert _Admin.asked == [2_153_954_422_186]


def test_a_pendulum_datetime_as_airflow_hands_it_is_asked_for_the_same_millisecond(monkeypatch):
    # A backfill's data interval arrives as pendulum DateTimes; their difference is a pendulum Interval,
    # which `// timedelta(...)` broke with an AttributeError in every backfill run's check_request.
    import pendulum

    monkeypatch.setattr(kafka_state, "AdminClient", _Admin)
    monkeypatch.setattr(_Admin, "asked", [])
    when = pendulum.datetime(2038, 4, 4, 2, 40, 22, 186000, tz="Europe/Berlin")
    assert kafka_state.offsets_for_times({"bootstrap.servers": "x:1"}, [("t", 0)], when) == {("t", 0): 7}
    assert _Admin.asked == [2_153_954_422_186]
