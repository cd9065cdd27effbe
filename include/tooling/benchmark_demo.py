"""The demo from a fresh clone (``make bench --parts demo``): what a new user's first command costs.

``make demo`` runs in a new clone of this checkout's commit, with no ``.venv``
and no ``.cache``: the Python packages are installed again, the JVM jars come
from Maven's local repository and the class-data-sharing archives are built
again, as on a machine that has run the demo before and as on CI's clones.
It is timed as a whole, and split where the demo's own first line appears
(set-up before it, the demo after it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError

#: The demo module's first line (``include/tooling/demo.py``): set-up is over when it appears.
DEMO_FIRST_LINE = "starting the local Kafka broker"
#: Variables of the calling shell that would point the clone at this checkout's environment.
_INHERITED_PREFIXES = ("KDE_", "AIRFLOW", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_", "PYSPARK_")


class DemoBenchError(PipelineError, RuntimeError):
    """The demo failed in its fresh clone, or never started."""


@dataclass(frozen=True)
class DemoTiming:
    """One ``make demo`` in a fresh clone."""

    commit: str
    #: ``make demo`` from the command to its exit.
    wall_s: float
    #: Up to the demo module's first line: ``make setup`` in the clone.
    setup_s: float


def clean_environment() -> dict[str, str]:
    """This process's environment less what points at this checkout's virtualenv, Airflow or pipelines."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}


def measure_demo(work: Path, log_path: Path, *, log: Callable[[str], None] = print, timeout_s: float = 1800.0,
                 command: Sequence[str] = ("make", "demo")) -> DemoTiming:  # fmt: skip
    """Clone the project's committed ``HEAD`` into ``work`` and time ``command`` (``make demo``) there; the clone
    is removed afterwards. Raises :class:`DemoBenchError` naming the log when the demo fails or runs past
    ``timeout_s`` (then it is killed with every process it started)."""
    clone = work / "demo-clone"
    if clone.exists():
        shutil.rmtree(clone)
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", str(settings.PROJECT_ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    log(f"demo: make demo in a fresh clone of {commit} ({clone})")
    setup_s: float | None = None
    try:
        with log_path.open("w") as out:
            started = time.monotonic()
            # A session of its own: on timeout the broker and Airflow the demo started go with it, so
            # nothing holds its output open.
            proc = subprocess.Popen(list(command), cwd=clone, env=clean_environment(), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
            # A watchdog, not a check per line: a demo that hangs silently prints no line to check on.
            watchdog = threading.Timer(timeout_s, os.killpg, (proc.pid, signal.SIGKILL))
            watchdog.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    out.write(line)
                    if setup_s is None and line.startswith(DEMO_FIRST_LINE):
                        setup_s = time.monotonic() - started
                code = proc.wait()
            finally:
                watchdog.cancel()
            wall_s = time.monotonic() - started
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    if code != 0:
        raise DemoBenchError(f"make demo in a fresh clone of {commit} exited with {code} after {wall_s:.0f} s "
                             f"(limit {timeout_s:.0f} s); its output is in {log_path}")  # fmt: skip
    if setup_s is None:
        raise DemoBenchError(f"make demo in a fresh clone of {commit} never printed {DEMO_FIRST_LINE!r}; its "
                             f"output is in {log_path}")  # fmt: skip
    return DemoTiming(commit, wall_s, setup_s)


def summary_line(demo: DemoTiming) -> str:
    """The benchmark summary's row for the demo."""
    return (f"| `make demo` on a fresh clone (set-up included, as on CI's clones) | {demo.wall_s:.0f} s, of which "
            f"set-up {demo.setup_s:.0f} s |")


def render_demo_markdown(demo: DemoTiming) -> str:
    """The report's section for the demo part."""
    return "\n".join([
        "## The demo from a fresh clone",
        "",
        f"`make demo` in a new clone of {demo.commit}, with no `.venv` and no `.cache`: the Python packages are "
        "installed again, the JVM jars come from Maven's local repository and the class-data-sharing archives are "
        "built again, as on a machine that has run the demo before (and on CI's clones). One run.",
        "",
        "| step | s |",
        "|---|---|",
        f"| set-up (`make setup`: the virtualenv, the jars, the archives) | {demo.setup_s:.0f} |",
        f"| the demo (broker, registry, data, four DAG runs, the summary) | {demo.wall_s - demo.setup_s:.0f} |",
        f"| `make demo`, whole | {demo.wall_s:.0f} |",
        "",
    ])
