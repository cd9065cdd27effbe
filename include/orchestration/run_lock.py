"""One run at a time per pipeline, whatever started it and whichever Airflow worker runs it.

``max_active_runs=1`` serialises a DAG's scheduled and manual runs, but
Airflow counts the runs of a backfill (``airflow backfill create``) apart
from them, so a backfill run and a scheduled run of the same pipeline could
otherwise overlap and run two jobs on one checkpoint. Every run therefore
takes this lock in its first task and gives it back in its last one
(``record_run``, which always runs).

The lock lives in the pipeline's own storage (``tables.lock_path``, by
default ``<lakehouse_root>/<name>/_lock``), which every worker that runs the
pipeline sees as it sees the tables. A folder on one worker's own disk is not
enough: with two workers, a scheduled run on one and a backfill on the other
would each find the lock free.

Each taking of the lock is an *epoch*: a file ``<epoch>.json`` (zero-padded,
so names sort as numbers) naming the run, created only if no file has that
name. The newest epoch holds the lock until its ``<epoch>.released`` marker
exists. Two runs that find epoch N free both try to create N + 1, and the
storage lets exactly one of them. On a filesystem (:class:`LocalFolder`) the
record is written to a private file first and then hard-linked to its name,
which fails if the name exists (atomic on local and NFS filesystems, and a
reader never sees half a record). On an object store
(:class:`ObjectStoreFolder`) it is a ``PUT`` with ``If-None-Match: *``, which
S3 (and S3-compatible stores that implement it) refuse with ``412`` when the
name exists. On HDFS (:class:`HdfsFolder`) it is the NameNode's create
without overwrite, which refuses a name that exists. The loser reads the
winner's record and waits.

A holder whose run is no longer queued or running (a lost worker, a run
marked failed by hand) holds nothing: the next run takes over with the next
epoch and records whom it took over from, so that it can stop what the dead
run left running first. The epoch numbers the holders apart: a holder's
record carries it, and a waiting run's log names it. It is also the fencing
token: the run hands it to its Spark jobs, and a table that a later epoch has
written to refuses the commits of an earlier one (see ``docs/guarantees.md``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # obstore's option types exist only in its stubs
    from obstore.store import ClientConfig, S3Config

    from include.config import PipelineConfig
    from include.readers.object_store import TableOptions

#: DAG run states in which a holder still holds the lock.
ACTIVE_STATES = ("queued", "running")
#: Released epochs older than this many before the newest are removed by the run that takes the lock.
KEEP_EPOCHS = 20
_DIGITS = 20
#: How long a reader waits for a record created without a hard link (see :meth:`LocalFolder.create`) to be written.
_WRITE_WAIT_S = 5.0


def _record_name(epoch: int) -> str:
    return f"{epoch:0{_DIGITS}d}.json"


def _released_name(epoch: int) -> str:
    return f"{epoch:0{_DIGITS}d}.released"


class LocalFolder:
    """The lock in a folder of a filesystem every worker mounts (a local disk, NFS)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __str__(self) -> str:
        return str(self.path)

    def prepare(self) -> None:
        """Create the folder if it is not there."""
        self.path.mkdir(parents=True, exist_ok=True)

    def names(self) -> set[str] | None:
        """The folder's file names; ``None`` when it does not exist."""
        try:
            return set(os.listdir(self.path))
        except FileNotFoundError:
            return None

    def read(self, name: str) -> str:
        """A file's text; a file created without a hard link (see :meth:`create`) is waited for until written."""
        deadline = time.monotonic() + _WRITE_WAIT_S
        while True:
            text = (self.path / name).read_text(errors="replace")
            if text or time.monotonic() > deadline:
                return text
            time.sleep(0.05)

    def create(self, name: str, text: str) -> bool:
        """Create ``name`` holding ``text`` unless it exists; ``True`` when this call created it."""
        path = self.path / name
        tmp = path.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(text)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            # A filesystem without hard links: an exclusive create, written after (readers wait for it).
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as out:
                out.write(text)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def remove(self, name: str) -> None:
        """Delete ``name`` if it is there."""
        (self.path / name).unlink(missing_ok=True)


class ObjectStoreFolder:
    """The lock under a prefix of an object store (``s3a://bucket/...``), which every worker and cluster reaches.

    A create is a ``PUT`` with ``If-None-Match: *``: the store lets exactly
    one of two concurrent creates of a name succeed (the other gets ``412``),
    and a ``PUT`` is never seen half written. ``config`` and ``client_options``
    are obstore's (:meth:`include.readers.object_store.S3Settings.obstore_args`).
    """

    def __init__(self, uri: str, config: dict[str, str], client_options: dict[str, str] | None = None) -> None:
        from obstore.store import from_url

        self.uri = uri.rstrip("/")
        # An S3 prefix (run_lock.lock_folder refuses any other store), with the option names obstore
        # also takes in their ``aws_`` form and the client's flags as strings: its typed dicts name neither.
        self.store = from_url(self.uri, config=cast("S3Config", config),
                              client_options=cast("ClientConfig", client_options or {}))  # fmt: skip

    def __str__(self) -> str:
        return self.uri

    def prepare(self) -> None:
        """Nothing: a prefix exists once an object is under it."""

    def names(self) -> set[str] | None:
        """The names under the prefix; ``None`` when there is none."""
        import obstore

        found = {str(meta["path"]).rsplit("/", 1)[-1] for batch in obstore.list(self.store) for meta in batch}
        return found or None

    def read(self, name: str) -> str:
        """An object's text."""
        import obstore

        return bytes(obstore.get(self.store, name).bytes()).decode(errors="replace")

    def create(self, name: str, text: str) -> bool:
        """Create ``name`` holding ``text`` unless it exists; ``True`` when this call created it."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            obstore.put(self.store, name, text.encode(), mode="create")
        except AlreadyExistsError:
            return False
        return True

    def remove(self, name: str) -> None:
        """Delete ``name`` (a missing one is no error)."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.delete(self.store, name)
        except NotFoundError:
            pass


class HdfsFolder:
    """The lock in a folder of an HDFS (``hdfs://namenode:port/...``), which every worker and cluster reaches.

    A create is the NameNode's create without overwrite: of two creates of one name exactly one
    succeeds, the others get ``FileAlreadyExistsException`` (HDFS's create is atomic, unlike an object
    store's, which Hadoop's filesystem specification keeps apart for this reason). The record is written
    after the create and becomes visible when the file is closed, so a reader waits for it as it does on
    a filesystem without hard links. The client is ``hdfs-native`` (no JVM); an HA nameservice's
    addresses come from ``$HADOOP_CONF_DIR``, as for every other Hadoop client.
    """

    def __init__(self, uri: str) -> None:
        from urllib.parse import urlsplit

        from hdfs_native import Client

        self.uri = uri.rstrip("/")
        parts = urlsplit(self.uri)
        self.client = Client(f"{parts.scheme}://{parts.netloc}")
        self.path = parts.path or "/"

    def __str__(self) -> str:
        return self.uri

    def _file(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def prepare(self) -> None:
        """Create the folder (and its parents) if it is not there."""
        self.client.mkdirs(self.path, create_parent=True)

    def names(self) -> set[str] | None:
        """The folder's file names; ``None`` when it does not exist."""
        try:
            return {status.path.rsplit("/", 1)[-1] for status in self.client.list_status(self.path)}
        except FileNotFoundError:
            return None

    def read(self, name: str) -> str:
        """A file's text, waited for until its writer has closed it."""
        deadline = time.monotonic() + _WRITE_WAIT_S
        while True:
            with self.client.read(self._file(name)) as reader:
                text = bytes(reader.read()).decode(errors="replace")
            if text or time.monotonic() > deadline:
                return text
            time.sleep(0.05)

    def create(self, name: str, text: str) -> bool:
        """Create ``name`` holding ``text`` unless it exists; ``True`` when this call created it."""
        from hdfs_native import WriteOptions

        try:
            writer = self.client.create(self._file(name), WriteOptions(overwrite=False, create_parent=True))
        except FileExistsError:
            return False
        with writer:
            writer.write(text.encode())
        return True

    def remove(self, name: str) -> None:
        """Delete ``name`` (a missing one is no error)."""
        self.client.delete(self._file(name))


def lock_folder(cfg: PipelineConfig, options: TableOptions | None = None) -> Path | ObjectStoreFolder | HdfsFolder:
    """Where the pipeline's run lock is kept (``tables.lock_path``): a folder, a folder of an HDFS, or a prefix
    of an S3 store reached with the connection ``tables.storage_connection_id``. Another URI is refused,
    naming the fix.

    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    from include.contract.errors import PipelineError
    from include.contract.locations import local_path, scheme_of
    from include.readers import object_store

    location = cfg.tables.lock_path
    folder = local_path(location)
    if folder is not None:
        return folder
    if scheme_of(location) in object_store.HDFS_SCHEMES:
        return HdfsFolder(location)
    if scheme_of(location) not in object_store.S3_SCHEMES:
        raise PipelineError(
            f"pipeline {cfg.name!r}: tables.lock_path {location!r} is on a store where the run lock cannot be "
            f"kept yet (only S3 and S3-compatible stores, {' or '.join(s + '://' for s in object_store.S3_SCHEMES)}, "
            "HDFS and filesystems); set tables.lock_path to an s3a:// or hdfs:// location or to a folder every "
            "Airflow worker that runs the pipeline mounts"
        )  # fmt: skip
    s3 = (options or object_store.TableOptions(cfg)).settings("lock_path")
    assert s3 is not None  # an s3a:// or s3:// location, checked above
    return ObjectStoreFolder(location, *s3.obstore_args())


#: Where a lock is kept: a folder path, or one of the folder classes above.
Folder = Path | LocalFolder | ObjectStoreFolder | HdfsFolder


def _folder(folder: Folder) -> LocalFolder | ObjectStoreFolder | HdfsFolder:
    return LocalFolder(folder) if isinstance(folder, Path) else folder


def _parse(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    # Anything but a holder object (an edit by hand, a damaged file) holds nothing.
    return data if isinstance(data, dict) else {"run_id": None, "unreadable": text[:200]}


def _newest(folder: LocalFolder | ObjectStoreFolder | HdfsFolder,
            names: set[str] | None) -> tuple[int, dict[str, Any], bool] | None:  # fmt: skip
    """The newest epoch among ``names`` (the folder's listing), its record and whether it was released;
    ``None`` when the lock was never taken."""
    if not names:
        return None
    epochs = [int(n[:-5]) for n in names if n.endswith(".json") and len(n) == _DIGITS + 5 and n[:-5].isdigit()]
    if not epochs:
        return None
    epoch = max(epochs)
    released = _released_name(epoch) in names
    return epoch, {**_parse(folder.read(_record_name(epoch))), "epoch": epoch}, released


def holder(folder: Folder) -> dict[str, Any] | None:
    """Who holds the lock now (its record, with its ``epoch``), or ``None``."""
    folder = _folder(folder)
    newest = _newest(folder, folder.names())
    if newest is None or newest[2]:
        return None
    return newest[1]


def acquire(folder: Folder, *, dag_id: str, run_id: str,
            run_state: Callable[[str, str], str | None]) -> dict[str, Any]:  # fmt: skip
    """Take the lock for ``run_id``; returns the holder's record after the call, with its ``epoch``.

    That is this run's own record when it took the lock (its ``run_id`` is
    ``run_id``), else the live holder's. ``run_state(dag_id, run_id)`` is the
    holder run's state in Airflow, or ``None`` when Airflow does not know the
    run (then it holds nothing). Taking a lock one already holds succeeds and
    keeps its epoch (a retried task); what it took over from stays recorded,
    so a retry still stops it.
    """
    folder = _folder(folder)
    folder.prepare()
    while True:
        names = folder.names()
        newest = _newest(folder, names)
        epoch, took_over_from = 0, None
        if newest is not None:
            epoch, current, released = newest
            if not released:
                if current.get("run_id") == run_id:
                    return current
                state = None
                if current.get("run_id"):
                    state = run_state(current.get("dag_id") or dag_id, current["run_id"])
                if state in ACTIVE_STATES:
                    return current
                took_over_from = {k: v for k, v in current.items() if k != "took_over_from"}
        mine: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "since": datetime.now(UTC).isoformat(),
                      "host": socket.gethostname(), "pid": os.getpid()}  # fmt: skip
        if took_over_from is not None:
            mine["took_over_from"] = took_over_from
        if folder.create(_record_name(epoch + 1), json.dumps(mine)):
            _prune(folder, names or set(), epoch + 1)
            return {**mine, "epoch": epoch + 1}
        # Another run created epoch + 1 first: judge its record as any holder's.


def release(folder: Folder, *, run_id: str) -> bool:
    """Give the lock back if ``run_id`` holds it; ``True`` when it did."""
    folder = _folder(folder)
    newest = _newest(folder, folder.names())
    if newest is None or newest[2] or newest[1].get("run_id") != run_id:
        return False
    epoch = newest[0]
    return folder.create(_released_name(epoch), json.dumps({"run_id": run_id, "at": datetime.now(UTC).isoformat()}))


def _prune(folder: LocalFolder | ObjectStoreFolder | HdfsFolder, names: set[str], newest: int) -> None:
    """Remove the files among ``names`` of epochs :data:`KEEP_EPOCHS` or more before ``newest`` (all released
    or taken over); files written after that listing are younger still."""
    for name in names:
        stem = name.split(".", 1)[0]
        if stem.isdigit() and len(stem) == _DIGITS and int(stem) <= newest - KEEP_EPOCHS:
            folder.remove(name)
