"""Where a pipeline's location points: a folder of this machine's filesystem, or an object store's URI."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

#: URI schemes that name one store, as Hadoop's and delta-rs' clients read them: compared as the first.
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
#: A URI scheme as RFC 3986 spells it.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def is_uri(location: str) -> bool:
    """Whether ``location`` is written as a URI (``<scheme>://...``, ``file://`` too) rather than as a path."""
    head, sep, _ = location.partition("://")
    return bool(sep) and bool(_SCHEME.fullmatch(head))


def scheme_of(location: str) -> str | None:
    """The URI scheme of ``location`` (``s3a``), or ``None`` for a local path or a ``file://`` URI."""
    head, sep, _ = location.partition("://")
    return head.lower() if sep and head.lower() != "file" else None


def local_path(location: str | Path) -> Path | None:
    """The local folder a location names (a path, or a ``file://`` URI); ``None`` for any other URI."""
    text = str(location)
    if "://" in text and not text.startswith("file://"):
        return None
    return Path(text.removeprefix("file://"))


def comparable(location: str) -> str:
    """``location`` as what it resolves to, so that two spellings of one folder compare equal: a local path or a
    ``file://`` URI made absolute with its symlinks resolved, a URI's scheme aliases folded (``s3a://`` is
    ``s3://``), its host lower-cased and its path normalised."""
    head, sep, rest = location.partition("://")
    if not sep or head.lower() == "file":
        return "file://" + os.path.realpath(os.path.expanduser(rest if sep else location))
    scheme = SCHEME_ALIASES.get(head.lower(), head.lower())
    host, _, path = rest.partition("/")
    return f"{scheme}://{host.lower()}" + os.path.normpath("/" + path).rstrip("/")


def is_within(inner: str, outer: str) -> bool:
    """Whether the comparable location ``inner`` is ``outer`` or lies inside it (:func:`comparable`)."""
    a, b = PurePosixPath(inner), PurePosixPath(outer)
    return a == b or b in a.parents
