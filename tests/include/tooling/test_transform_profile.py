"""make profile-transform's command line (the profile itself needs a broker and Spark)."""

from __future__ import annotations

import pytest

from include.settings import LAKEHOUSE_ROOT_ENV
from include.tooling import local_kafka, transform_profile


@pytest.mark.parametrize("flag", ["--orders", "--events", "--batches", "--max-offsets-per-trigger"])
def test_a_count_that_is_not_positive_is_refused_before_the_broker_starts(flag, monkeypatch, capsys):
    def start(*_args, **_kwargs):
        raise AssertionError(f"{flag} 0 started a broker")

    monkeypatch.setattr(local_kafka, "start", start)
    monkeypatch.setenv(LAKEHOUSE_ROOT_ENV, "unused")  # restored after the test, whatever main sets
    with pytest.raises(SystemExit) as done:
        transform_profile.main([flag, "0"])
    assert done.value.code == 2
    assert f"argument {flag}: expected a positive integer, got 0" in capsys.readouterr().err
