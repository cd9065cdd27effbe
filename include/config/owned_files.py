"""The files a pipeline file may make the loader read: its own, never any file the DAG processor can read.

A pipeline file's author is trusted with the pipeline's tables and schema, not with the Airflow
worker's files (``docs/security.md``). ``transform.schema_file`` and ``transform.value_schema.file``
name files the loader reads, and a loader error shows up as an Airflow import error: a path to a
secrets file there once printed the secret in the error. So such a file must be

- a regular file (not ``/dev/zero``, a FIFO or a folder, which would hang or exhaust the reader),
- inside the pipelines folder (the pipeline file's own folder) once symlinks are resolved, or under a
  folder the operator lists in ``KDE_PIPELINE_FILE_ROOTS``,
- at most :data:`MAX_FILE_BYTES` long,

and a refusal names the path and the fix, never what the file holds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError

#: The largest schema file the loader reads; a schema of fields or an Avro record is a few KB.
MAX_FILE_BYTES = 1 << 20


class NotOwnedFile(PipelineError, ValueError):
    """A file the pipeline file names that it may not make the loader read; the message says why and the fix."""


def allowed_roots(folder: Path) -> tuple[Path, ...]:
    """Where a pipeline file's files may be: its own folder and the operator's ``KDE_PIPELINE_FILE_ROOTS``."""
    return tuple(Path(os.path.realpath(p)) for p in (folder, *settings.pipeline_file_roots()))


def check_owned(path: Path, shown: str, folder: Path) -> Path:
    """``path`` with its symlinks resolved, if the pipeline file in ``folder`` may make the loader read it;
    raises :class:`NotOwnedFile` otherwise (nothing of the file is read)."""
    real = Path(os.path.realpath(path))
    roots = allowed_roots(folder)
    if not any(real == root or root in real.parents for root in roots):
        raise NotOwnedFile(
            f"{shown!r} resolves to {real}, outside the pipelines folder {roots[0]}"
            + (f" and the roots of {settings.PIPELINE_FILE_ROOTS_ENV}" if len(roots) > 1 else "")
            + f"; put the file beside the pipeline file, or have the operator list its folder in "
            f"{settings.PIPELINE_FILE_ROOTS_ENV}"
        )
    try:
        info = real.stat()
    except OSError as exc:
        raise NotOwnedFile(f"cannot read {shown!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise NotOwnedFile(f"{shown!r} is not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise NotOwnedFile(
            f"{shown!r} holds {info.st_size} bytes, over the {MAX_FILE_BYTES} a schema file may hold"
        )
    return real


def read_owned(path: Path, shown: str) -> str:
    """The UTF-8 text of a file :func:`check_owned` let through, read to at most :data:`MAX_FILE_BYTES`."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise NotOwnedFile(f"{shown!r} holds more than the {MAX_FILE_BYTES} bytes a schema file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotOwnedFile(f"{shown!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
