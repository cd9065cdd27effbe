"""``read_until``: how far back a history reader reads, for every kind of answer a reader gives."""

from __future__ import annotations

import pytest

from include.contract.history import FIRST_READ, WIDEN, read_until


class History:
    """A table history of ``size`` versions, newest first, that records every limit it was asked for."""

    def __init__(self, size: int) -> None:
        self.versions = list(range(size - 1, -1, -1))
        self.asked: list[int] = []

    def __call__(self, limit: int) -> list[int]:
        self.asked.append(limit)
        return self.versions[:limit]


def test_stops_at_the_first_read_when_it_answers():
    history = History(1000)
    assert read_until(history, lambda e: True) == history.versions[:FIRST_READ]
    assert history.asked == [FIRST_READ]


def test_widens_tenfold_until_the_question_is_answered():
    history = History(5000)
    found = read_until(history, lambda e: 1234 in e)
    assert history.asked == [FIRST_READ, FIRST_READ * WIDEN, FIRST_READ * WIDEN**2, FIRST_READ * WIDEN**3]
    assert 1234 in found


def test_stops_when_the_whole_history_is_read_without_an_answer():
    history = History(150)
    assert read_until(history, lambda e: False) == history.versions
    assert history.asked == [FIRST_READ, FIRST_READ * WIDEN]


def test_a_known_count_caps_the_next_read_and_ends_when_reached():
    history = History(1000)
    found = read_until(history, lambda e: 57)
    assert history.asked == [FIRST_READ, 57]
    assert len(found) == 57


def test_a_count_already_covered_ends_at_once():
    history = History(1000)
    read_until(history, lambda e: 5, first=30)
    assert history.asked == [30]


def test_first_must_ask_for_something():
    with pytest.raises(ValueError, match="first must be at least 1"):
        read_until(History(3), lambda e: True, first=0)
