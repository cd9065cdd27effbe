"""A local Java server of the demo and the tests (the schema registry, the S3-compatible store): started in a
session of its own with its output in a log, waited for until it answers, and stopped."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: A log4j2 configuration that sends every INFO line to one file (``{log}``): Kafka's broker and Connect.
_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""


def log_to_file(config: Path, log: Path) -> str:
    """Write a log4j2 configuration to ``config`` that logs into ``log``; returns the JVM flag that uses it."""
    config.write_text(_LOG4J2.format(log=log))
    return f"-Dlog4j2.configurationFile={config}"


def java() -> str:
    """The ``java`` on PATH."""
    return shutil.which("java") or "java"


def launch(cmd: Sequence[str], *, cwd: Path, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in ``cwd``, in a session of its own, appending its output to ``log``; ``env`` replaces the
    environment when given."""
    with log.open("ab") as out:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env=None if env is None else dict(env))  # fmt: skip


def stop(process: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """Terminate the server, and kill it if it has not ended within ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(process: subprocess.Popen, ready: Callable[[], bool], *, name: str, port: int, log: Path,
               timeout_s: float, error: type[Exception], interval_s: float = 0.3) -> None:  # fmt: skip
    """Return once ``ready()``; raise ``error`` (with the log's tail) if the server exits first, or (after
    stopping it) if ``timeout_s`` passes. ``ready`` may raise ``OSError`` or ``ValueError`` while it starts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise error(f"{name} exited with {process.returncode}; its log {log}:\n"
                        + log.read_text(errors="replace")[-2000:])  # fmt: skip
        try:
            if ready():
                return
        except (OSError, ValueError):
            pass
        time.sleep(interval_s)
    stop(process)
    raise error(f"{name} did not answer on port {port} within {timeout_s:.0f}s; see {log}")
