"""A local S3-compatible server for the tests and ``make demo STORE=s3``: s3proxy on a folder.

s3proxy (Apache-2.0, ``org.gaul:s3proxy`` on Maven Central) serves the S3 API
over a local folder (its ``filesystem-nio2`` store: a bucket is a folder, an
object a file). It is chosen over moto's server for the semantics the
pipeline relies on, each done the way S3 does them:

- a conditional create (``PUT`` with ``If-None-Match: *``) is atomic: the
  object is published with a hard link, which fails when the name exists, so
  of two concurrent creates exactly one wins and the other gets ``412``
  (moto checks, then writes, without a lock between);
- a listing shows every object written before it (strong read-after-write);
- no rename is needed: Delta's commits on S3 are single ``PUT``s.

The server checks request signatures (AWS Signature V2 or V4) against one
key pair, so the credential path is exercised as against S3 itself.

``python -m include.tooling.local_s3 run`` starts one in the foreground.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError
from include.ports import free_port
from include.readers.object_store import S3Settings
from include.tooling import java_server

#: The key pair the local server accepts (a test server's, not a secret).
ACCESS_KEY = "kde-local"
SECRET_KEY = "kde-local-secret"
REGION = "us-east-1"


class ObjectStoreServerError(PipelineError, RuntimeError):
    """The local S3-compatible server could not be started; the message carries its log."""


@dataclass
class LocalS3:
    """A running local S3-compatible server."""

    port: int
    root: Path
    process: subprocess.Popen
    log: Path

    @property
    def endpoint(self) -> str:
        """The server's address, as an ``aws`` connection's ``endpoint_url`` holds it."""
        return f"http://127.0.0.1:{self.port}"

    def create_bucket(self, name: str) -> str:
        """A new empty bucket (a folder of the server's root); returns its ``s3a://`` URI."""
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def connection_extra(self) -> dict:
        """The ``extra`` of an Airflow ``aws`` connection to this server (login and password: the key pair)."""
        return {"endpoint_url": self.endpoint, "region_name": REGION,
                "config_kwargs": {"s3": {"addressing_style": "path"}}}  # fmt: skip

    def connection(self) -> dict:
        """An Airflow ``aws`` connection to this server, as ``AIRFLOW_CONN_<ID>`` holds it in JSON."""
        return {"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY, "extra": self.connection_extra()}

    def settings(self) -> S3Settings:
        """What that connection reads as (:func:`include.readers.object_store.s3_settings`)."""
        return S3Settings(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, endpoint=self.endpoint,
                          region=REGION)  # fmt: skip

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server; its folder stays."""
        java_server.stop(self.process, timeout_s)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start(root: Path, *, port: int | None = None, timeout_s: float = 60.0) -> LocalS3:
    """Serve the folder ``root`` on ``port`` (a free one by default); waits until the server answers."""
    from include.spark import jvm_deps

    classpath = ":".join(str(p) for p in jvm_deps.resolve("s3proxy"))
    port = port or free_port()
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    conf = root / "s3proxy.properties"
    conf.write_text("\n".join([
        f"s3proxy.endpoint=http://127.0.0.1:{port}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={ACCESS_KEY}",
        f"s3proxy.credential={SECRET_KEY}",
        "jclouds.provider=filesystem-nio2",
        f"jclouds.filesystem.basedir={data}",
        f"jclouds.identity={ACCESS_KEY}",
        f"jclouds.credential={SECRET_KEY}",
    ]) + "\n")  # fmt: skip
    log = root / "s3proxy.log"
    # A small heap and the client compiler: a test server's load is light, its start should be quick.
    cmd = [java_server.java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-DLOG_LEVEL=warn",
           "-cp", classpath, "org.gaul.s3proxy.Main", "--properties", str(conf)]  # fmt: skip
    server = LocalS3(port, data, java_server.launch(cmd, cwd=root, log=log), log)
    java_server.wait_ready(server.process, lambda: _answers(port), name="s3proxy", port=port, log=log,
                           timeout_s=timeout_s, error=ObjectStoreServerError, interval_s=0.2)
    return server


def main(argv: list[str] | None = None) -> int:
    """``run``: serve ``<KDE_VAR_DIR>/s3`` in the foreground, with a bucket ``lakehouse``."""
    p = argparse.ArgumentParser(prog="local_s3", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("run",))
    p.add_argument("--port", type=int, default=None)
    a = p.parse_args(argv)
    server = start(settings.VAR_DIR / "s3", port=a.port)
    print(f"S3-compatible server at {server.endpoint}, bucket {server.create_bucket('lakehouse')} "
          f"(key {ACCESS_KEY}); Ctrl-C stops it")  # fmt: skip
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
