"""The fault soak under a real scheduler (:mod:`tests.soak.scheduler_soak`): ``make soak-scheduler``.

A tier of its own, in neither ``make test`` nor ``make test-all``: 30 faults under a real scheduler take
about as long as the whole full tier. ``SOAK_FAULTS`` (default 30) sets how many, ``SOAK_SEED`` replays a
sequence (``random`` draws one), ``SOAK_KINDS`` restricts the kinds (comma-separated).
"""

from __future__ import annotations

import os
import random

import pytest

from tests.soak.scheduler_soak import FAULTS, SchedulerSoak, plan

pytestmark = [pytest.mark.integration, pytest.mark.scheduler_soak]

SEED = 20261201


@pytest.mark.timeout(0)
def test_faults_under_a_real_scheduler_with_the_default_retries_lose_and_duplicate_nothing(tmp_path_factory,
                                                                                           record_property):  # fmt: skip
    faults = int(os.environ.get("SOAK_FAULTS", "30"))
    seed_text = os.environ.get("SOAK_SEED", str(SEED))
    seed = random.SystemRandom().randrange(10**9) if seed_text == "random" else int(seed_text)
    only = [k for k in os.environ.get("SOAK_KINDS", "").split(",") if k]
    print(f"scheduler soak: seed {seed} (replay with SOAK_SEED={seed}), {faults} faults")
    soak = SchedulerSoak(tmp_path_factory.mktemp("scheduler-soak"), seed, log=lambda line: print(line, flush=True))
    problems: list[str] = []
    try:
        soak.warm_up()
        for step, kind in enumerate(plan(seed, faults, only)):
            soak.fault(step, kind)
        problems = soak.finish()
    finally:
        report = soak.report()
        print(report)
        record_property("soak_report", report)
        soak.close()
    assert not problems, "\n".join(problems)
    injected = [r for r in soak.results if r.injected]
    assert len(injected) >= faults * 0.9, f"only {len(injected)} of {len(soak.results)} faults hit a run"
    if faults >= 2 * len(FAULTS) and not only:
        assert {r.kind for r in injected} == set(FAULTS), "a kind never hit a run"
    unfinished = [r for r in injected if r.run_state != "success"]
    assert not unfinished, f"faulted runs that did not succeed: {[(r.step, r.kind, r.run_state) for r in unfinished]}"
    assert any(any(n > 1 for n in r.tries.values()) for r in injected), "no fault made Airflow retry a task"
