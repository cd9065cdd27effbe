"""``airflow`` commands forked from a warm interpreter, for many DAG runs on one Airflow home.

Every ``airflow dags test`` process imports Airflow's command line, task SDK
and execution API before its run starts: seconds of CPU each time, which a
test suite of dozens of DAG runs on a small machine pays again and again.
:class:`WarmAirflow` starts one server process per Airflow home that imports
those modules once and then forks a child per command. The child takes the
command's environment, working folder and log file, and runs Airflow's own
command line (``airflow.__main__.main``, what the ``airflow`` executable
runs), so the DAG run is the same; only the imports are already done.

The server also builds, before any fork, the in-process execution API that
each task of a ``dags test`` talks to (:func:`_build_execution_api`).

A DAG run with no new records forked from a server that built the execution
API costs about a fifth of the CPU of a new ``airflow`` process, and about
half its wall time; most of what is left is ``dags test`` polling: it sleeps
1 s per loop in which no task can start.

Limits, and why:

- The server imports nothing of this project: :mod:`include.settings` reads
  the environment when it is imported, and each command brings its own
  environment. The child also drops any ``include`` module it inherited.
- Airflow read its settings (``AIRFLOW_HOME``, ``AIRFLOW__*``) when the
  server imported it, so :meth:`WarmAirflow.accepts` refuses a command whose
  settings differ; the caller then starts a real process.
- A command whose caller gives up on it (a timeout, a test interrupted,
  the caller's process gone) is stopped, its Python stacks and, where
  ``gdb`` is installed, its native ones written into its log first: a
  forked command is no child of its caller, so nothing else would end it,
  and a hung one would spin on through every later test.
- A forked command's ``/proc/<pid>/environ`` and command line are the
  server's. A caller that finds processes by those (the fault soak) leaves
  out the server's command line (:attr:`WarmAirflow.pid`) and holds each
  command's :class:`WarmCommand`; the Spark processes a command starts get
  the command's own environment.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

#: What a command's environment must share with the server's: what Airflow reads when it is imported.
_SETTINGS_PREFIXES = ("AIRFLOW__",)
_SETTINGS_KEYS = ("AIRFLOW_HOME", "PYTHONPATH")


def _settings(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_SETTINGS_PREFIXES) or k in _SETTINGS_KEYS}


class WarmAirflow:
    """A warm ``airflow`` command line for one Airflow home; :meth:`stop` it when done."""

    def __init__(self, env: Mapping[str, str], *, timeout_s: float = 120) -> None:
        """Start the server with ``env`` (an Airflow home's environment, as :mod:`airflow_local` builds it)."""
        self.env = dict(env)
        self._dir = Path(tempfile.mkdtemp(prefix="kde-warm-airflow-"))
        self.socket_path = self._dir / "server.sock"
        self.log_path = self._dir / "server.log"
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen([sys.executable, __file__, str(self.socket_path), str(os.getpid())],
                                          env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not self.socket_path.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the warm Airflow server did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        """The server's process id (the commands it forks are its grandchildren)."""
        return self._proc.pid

    def accepts(self, env: Mapping[str, str]) -> bool:
        """Whether a command with ``env`` can run here: the same Airflow settings as the server's."""
        return self._proc.poll() is None and _settings(env) == _settings(self.env)

    def start(self, args: Sequence[str], env: Mapping[str, str], *, log_file: Path) -> WarmCommand:
        """Start ``airflow <args>`` forked from the server, its output into ``log_file``; it runs on while
        the caller goes on (several may run at once), as :class:`subprocess.Popen` would."""
        if not self.accepts(env):
            raise ValueError("this command's Airflow settings differ from the warm server's; run it as a process")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        request = {"argv": list(args), "env": dict(env), "cwd": os.getcwd(), "log": str(log_file)}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(60)
            conn.connect(str(self.socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            pid = json.loads(_line(conn, self.log_path))["pid"]
        except BaseException:
            conn.close()
            raise
        return WarmCommand(["airflow", *args], conn, pid, self.log_path)

    def run(self, args: Sequence[str], env: Mapping[str, str], *, log_file: Path, timeout_s: float = 900) -> int:
        """Run ``airflow <args>`` forked from the server, its output into ``log_file``; its exit code.

        On timeout the command is killed and :class:`subprocess.TimeoutExpired` raised, as
        :func:`subprocess.run` does.
        """
        command = self.start(args, env, log_file=log_file)
        try:
            return command.wait(timeout_s)
        except BaseException:  # a timeout here, or the test around it stopped (pytest-timeout, ^C)
            command.give_up()
            raise

    def completed(self, args: Sequence[str], env: Mapping[str, str], *, log_file: Path,
                  timeout_s: float = 900) -> subprocess.CompletedProcess:  # fmt: skip
        """:meth:`run`, returned as :func:`subprocess.run` would: the log's text as ``stdout``, ``stderr`` empty."""
        code = self.run(args, env, log_file=log_file, timeout_s=timeout_s)
        return subprocess.CompletedProcess(["airflow", *args], code, stdout=log_file.read_text(errors="replace"),
                                           stderr="")  # fmt: skip

    def stop(self) -> None:
        """Stop the server (a command still running is left to end)."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


class WarmCommand:
    """A command forked from a :class:`WarmAirflow` server, handled like :class:`subprocess.Popen`.

    ``pid`` is the command's own process (a grandchild of the server, not a
    child of the caller): signal it as a real ``airflow`` process. Its exit
    code comes back on the request's socket from the server's process that
    waits for it, negative for a signal as :attr:`subprocess.Popen.returncode`.
    """

    def __init__(self, args: list[str], conn: socket.socket, pid: int, server_log: Path) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._conn, self._server_log = conn, server_log
        self._lost: RuntimeError | None = None  # the server ended before the exit code came: said each time

    def poll(self) -> int | None:
        """The exit code if the command has ended, else ``None``."""
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command's end; its exit code. :class:`subprocess.TimeoutExpired` after ``timeout`` s."""
        if self._lost is not None:
            raise self._lost
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            try:
                self.returncode = int(json.loads(_line(self._conn, self._server_log))["returncode"])
            except RuntimeError as exc:
                self._lost = exc
                raise
            finally:
                self._conn.close()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the command (its own children are left alone, as for a killed process)."""
        _kill(self.pid)

    def give_up(self, timeout_s: float = 90) -> None:
        """Stop waiting for the command: its keeper writes its stacks into its log and kills it.

        Returns once it has ended; SIGKILLs it after ``timeout_s`` if the keeper has not.
        """
        if self.returncode is not None or self._lost is not None:
            return
        self._conn.close()  # what tells the keeper (the same as when the caller's process ends)
        self._lost = RuntimeError(f"{self.args} was given up on and stopped")
        deadline = time.monotonic() + timeout_s
        while _running(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _running(self.pid):  # only then: once its keeper has collected it, the pid may be another's
            _kill(self.pid)


def _line(conn: socket.socket, server_log: Path) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise RuntimeError(f"the warm Airflow server ended during a command: {server_log.read_text()[-3000:]}")
        data += chunk
    return data


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive: neither gone nor ended (a zombie its keeper has yet to collect)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stop_with_stacks(pid: int, log_file: Path) -> None:
    """SIGKILL a command given up on, after writing where it is into its log: its Python threads'
    stacks (faulthandler, registered on SIGUSR1 by :func:`_child`), and with ``gdb`` installed the
    native ones too, since a call hung inside a C library shows only as its Python caller."""
    if not _running(pid):
        return
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    time.sleep(0.5)  # the handler writes from the process itself
    gdb = shutil.which("gdb")
    if gdb is not None:
        with log_file.open("ab") as log:
            log.write(f"\n--- native stacks of {pid}, given up on ---\n".encode())
            log.flush()
            try:
                subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               timeout=60, check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                pass
    _kill(pid)


# --- the server process ----------------------------------------------------------------------------


def _serve(socket_path: str, parent_pid: int) -> None:
    # What every `airflow dags test` imports before its run starts, and what its tasks import (Airflow's
    # migration check, delta-rs's writer, which takes pandas, the Spark provider); nothing of this project.
    import airflow.__main__  # noqa: F401
    import airflow.api_fastapi.execution_api.app  # noqa: F401
    import airflow.cli.commands.dag_command  # noqa: F401
    import airflow.sdk.definitions.dag  # noqa: F401
    import airflow.sdk.execution_time.supervisor  # noqa: F401
    import airflow.sdk.execution_time.task_runner  # noqa: F401
    import alembic.runtime.environment  # noqa: F401
    import alembic.runtime.migration  # noqa: F401
    import confluent_kafka  # noqa: F401
    import deltalake  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import yaml  # noqa: F401
    from airflow.providers.apache.spark.hooks import spark_submit  # noqa: F401
    from airflow.providers.standard.operators import trigger_dagrun  # noqa: F401

    _build_execution_api()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = socket_path + ".partial"
    listener.bind(partial)
    listener.listen(4)
    os.rename(partial, socket_path)  # the client waits for this name: the server is ready
    listener.settimeout(2)
    while os.getppid() == parent_pid:  # the process that started it is gone: so is the need
        _reap()
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        request = json.loads(conn.makefile("rb").readline())
        sys.stdout.flush()
        sys.stderr.flush()
        # A keeper process per command forks the command and waits for it, so that commands run at once
        # (two DAG runs racing for one lock) and each exit code reaches its caller as soon as it is known.
        if os.fork() == 0:
            listener.close()
            _keep(conn, request)
        conn.close()


def _keep(conn: socket.socket, request: dict) -> NoReturn:
    """The keeper: fork the command, send its pid, wait for it, send its exit code; never return.

    A caller that closes its end before the exit code came (its process gone, or the handle dropped)
    has given up on the command: the keeper stops it, stacks into its log first. Whatever else goes
    wrong here ends the keeper, and never leaves this copy of the server's loop running.
    """
    try:
        pid = os.fork()
        if pid == 0:
            _child(conn, request)
        ended = os.pidfd_open(pid)
        try:
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except OSError:
            pass  # the caller is gone: the recv below says so at once
        while ended not in select.select([ended, conn], [], [])[0]:
            try:
                gone = not conn.recv(4096)
            except OSError:
                gone = True
            if gone:  # the caller closed its end without waiting for the exit code
                _stop_with_stacks(pid, Path(request["log"]))
                break
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        except OSError:
            pass  # the caller is gone (it gave up and killed the command)
    except BaseException:  # noqa: BLE001 - the server's log says what ended the keeper
        traceback.print_exc()
    finally:
        os._exit(0)


def _reap() -> None:
    """Collect the keepers that have ended."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _build_execution_api() -> None:
    """Build the in-process execution API every task of a ``dags test`` talks to, once, before any fork.

    ``dags test`` runs each task against an in-process copy of Airflow's execution API, made once
    per process (``in_process_api_server`` is cached). Its FastAPI app is built on first use and
    Cadwyn generates its versioned routes on its first request: about 3.5 s of CPU, all in memory,
    which every forked child would otherwise pay again. A request that matches no route does it
    without a database or a thread; the transport (an event loop on a thread of its own) is left for
    each child to make, since threads do not survive a fork.
    """
    import asyncio

    from airflow.sdk.execution_time.supervisor import in_process_api_server

    app = in_process_api_server().app
    replies: list[dict] = []

    async def nothing() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def keep(message: dict) -> None:
        replies.append(message)

    scope = {"type": "http", "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/warm-up",
             "raw_path": b"/warm-up", "root_path": "", "query_string": b"", "headers": [(b"host", b"warm")],
             "server": ("warm", 80), "client": ("warm", 0)}  # fmt: skip
    asyncio.run(app(scope, nothing, keep))
    if not replies or replies[0].get("status") != 404:
        raise RuntimeError(f"the execution API's warm-up request got {replies[:1]}, expected a 404")


def _child(conn: socket.socket, request: dict) -> NoReturn:
    code = 1
    try:
        conn.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        # Where every thread is, into the log, when a caller gives up on the command (_stop_with_stacks).
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        # Read with this command's environment, not the server's.
        for name in [n for n in sys.modules if n == "include" or n.startswith("include.")]:
            del sys.modules[name]
        sys.argv = ["airflow", *request["argv"]]
        from airflow.__main__ import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)  # as the interpreter prints it on exit
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever ends the command, its log says what
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    # Started as a file, not ``-m``: no package of this project is imported. Its folder leaves the
    # path; the ``airflow`` executable's folder takes its place, as when that executable runs.
    sys.path[0] = str(Path(sys.executable).parent)
    _serve(sys.argv[1], int(sys.argv[2]))
