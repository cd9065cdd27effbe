"""A job's file reads through its Hadoop filesystem: checkpoints on an object store, with the session's keys.

:func:`checkpoint_files` picks local file reads for a folder and
:class:`HadoopFiles` for an object store's URI; both answer
:class:`include.readers.spark_checkpoint.Files`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from include.readers.spark_checkpoint import Files

T = TypeVar("T")


class HadoopFiles:
    """Checkpoint reads (:class:`include.readers.spark_checkpoint.Files`) through the job's Hadoop filesystem:
    what an object-store checkpoint takes, with the credentials the session was built with."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark.sparkContext._jvm
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def exists(self, path: str) -> bool:
        """Whether a file or folder (a key or a prefix, on an object store) is at ``path``."""
        fs, p = self._fs(path)
        return bool(_hadoop_io(path, lambda: fs.exists(p)))

    def children(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is_folder)`` of each entry under ``path``; empty when there is none."""
        fs, p = self._fs(path)
        try:
            return _hadoop_io(path, lambda: [(s.getPath().getName(), bool(s.isDirectory())) for s in fs.listStatus(p)])
        except FileNotFoundError:
            return []

    def read_bytes(self, path: str) -> bytes:
        """The whole file, in one request (no existence check first): :class:`FileNotFoundError` when there
        is none, :class:`OSError` for another Hadoop error."""
        fs, p = self._fs(path)

        def read() -> bytes:
            stream = fs.open(p)
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        return _hadoop_io(path, read)


def _hadoop_io(path: str, call: Callable[[], T]) -> T:
    """``call()``, a Hadoop error raised as :class:`FileNotFoundError` (a missing file) or :class:`OSError`
    naming ``path``, as local reads raise them."""
    from py4j.protocol import Py4JJavaError

    try:
        return call()
    except Py4JJavaError as exc:
        java = exc.java_exception
        error = FileNotFoundError if java.getClass().getName().endswith("FileNotFoundException") else OSError
        raise error(f"{path}: {java.toString()}") from None


def checkpoint_files(spark: SparkSession, root: str) -> Files:
    """How a job reads the checkpoints under ``root``: local file reads for a folder, the session's Hadoop
    filesystem for an object store."""
    from include.contract.locations import local_path
    from include.readers import spark_checkpoint

    return spark_checkpoint.LOCAL if local_path(root) is not None else HadoopFiles(spark)
