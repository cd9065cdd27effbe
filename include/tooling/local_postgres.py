"""A throwaway PostgreSQL server for the change-data-capture tests: Debian's PostgreSQL, logical decoding on.

The server is the distribution's own (``postgresql-<major>`` from Debian's packages, which ``make
db-tools`` installs when it is missing), started here on a fresh data folder and a free port, with
``wal_level = logical`` so Debezium's PostgreSQL connector can stream it through ``pgoutput``. Nothing
of the machine's own clusters is touched.

PostgreSQL refuses to run as root: run as root (a container, CI), the server and ``initdb`` run as the
``postgres`` user the package creates, and the data folder is made outside any folder only root may
enter. SQL goes through ``psql`` (no Python driver is needed); :meth:`LocalPostgres.rows` reads a
table as JSON, which is what the tests compare silver with.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from include.contract.errors import PipelineError
from include.ports import free_port

#: The database the server is created with and the connector reads.
DATABASE = "postgres"
USER = "postgres"


class PostgresError(PipelineError, RuntimeError):
    """PostgreSQL is missing, would not start, or refused a statement; the message says which and why."""


def binaries() -> Path:
    """The newest installed PostgreSQL's ``bin`` folder (``/usr/lib/postgresql/<major>/bin``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise PostgresError("no PostgreSQL server is installed (/usr/lib/postgresql/*/bin/postgres); "
                            "run `make db-tools`, which installs Debian's postgresql package")  # fmt: skip
    return Path(found[-1]).parent


def _run_as() -> dict[str, Any]:
    """``subprocess`` arguments that run the server as ``postgres`` when this process is root."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(USER)
    except KeyError as exc:
        raise PostgresError("running as root, PostgreSQL needs the 'postgres' user to run as; Debian's "
                            "postgresql package creates it (`make db-tools`)") from exc  # fmt: skip
    return {"user": USER, "group": USER}


@dataclass
class LocalPostgres:
    """A running server: its port, data folder and process."""

    port: int
    data: Path
    process: subprocess.Popen
    log: Path

    def psql(self, sql: str, *, timeout_s: float = 60.0) -> str:
        """Run ``sql`` (one or more statements, in one session) and return what ``psql`` printed.

        Any failing statement stops the script and raises :class:`PostgresError` with PostgreSQL's message.
        """
        cmd = [str(binaries() / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
               "-p", str(self.port), "-U", USER, "-d", DATABASE, "-f", "-"]  # fmt: skip
        proc = subprocess.run(cmd, input=sql, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise PostgresError(f"psql failed ({proc.returncode}): {proc.stderr.strip()}\nSQL: {sql[:500]}")
        return proc.stdout

    def rows(self, query: str) -> list[dict[str, Any]]:
        """The rows of ``query`` (a ``SELECT``) as JSON objects, in PostgreSQL's own JSON (``json_agg``)."""
        return json.loads(self.psql(f"SELECT coalesce(json_agg(q), '[]') FROM ({query}) q;"))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Fast shutdown (SIGINT), then the data folder is removed."""
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data, ignore_errors=True)


def start(*, timeout_s: float = 60.0) -> LocalPostgres:
    """A new server on a fresh data folder and a free port, ready for SQL and logical replication."""
    bin_dir = binaries()
    as_user = _run_as()
    # Outside pytest's and the caller's temporary folders: those are often owner-only, and the server
    # may run as another user than the test.
    data = Path(tempfile.mkdtemp(prefix="kde-pg-"))
    if as_user:
        os.chown(data, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
    init = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data / "db"), "-U", USER, "--auth=trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, text=True, cwd=data, **as_user,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        raise PostgresError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
    port = free_port()
    log = data / "postgres.log"
    settings = {
        "listen_addresses": "127.0.0.1", "port": str(port), "unix_socket_directories": str(data),
        "wal_level": "logical", "max_wal_senders": "4", "max_replication_slots": "4",
        # A test's server: nothing here must survive a machine crash.
        "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
    }  # fmt: skip
    cmd = [str(bin_dir / "postgres"), "-D", str(data / "db")]
    for name, value in settings.items():
        cmd += ["-c", f"{name}={value}"]
    with log.open("ab") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=data, start_new_session=True,
                                   **as_user)  # fmt: skip
    server = LocalPostgres(port, data, process, log)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            text = log.read_text(errors="replace")[-2000:]
            shutil.rmtree(data, ignore_errors=True)
            raise PostgresError(f"postgres exited with {process.returncode}: {text}")
        ready = subprocess.run([str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)])
        if ready.returncode == 0:
            return server
        if time.monotonic() > deadline:
            server.stop()
            raise PostgresError(f"postgres did not accept connections on port {port} within {timeout_s:.0f}s")
        time.sleep(0.2)
