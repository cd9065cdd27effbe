"""How the Airflow side reaches a pipeline location on an object store: an Airflow connection of type ``aws``.

The pipeline file names the connection (``tables.storage_connection_id``,
default ``aws_default``); the connection holds every secret, so none is in
the pipeline file, on a command line or in a log. Its fields, as the Amazon
provider reads them (the provider itself is not needed):

- login and password: the access key id and the secret access key (or
  ``aws_access_key_id`` / ``aws_secret_access_key`` in the extra);
- extra ``aws_session_token``: temporary credentials;
- extra ``endpoint_url`` (or ``service_config.s3.endpoint_url``, which wins):
  an S3-compatible store instead of AWS;
- extra ``region_name``;
- extra ``config_kwargs: {"s3": {"addressing_style": "virtual"}}``: requests
  to ``bucket.host`` instead of ``host/bucket`` (path style, the default here,
  which most S3-compatible stores need and AWS serves too);
- extra ``allowed_roots``: the ``s3://bucket/prefix`` URIs under which a
  pipeline's locations on the store may lie, the connection owner's limit on
  what pipeline files reach with its credentials. Left out: anywhere.

The same settings serve delta-rs (the tables) and obstore (the run lock):
both are the ``object_store`` library underneath, with the same keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract.locations import comparable, is_within, scheme_of
from include.readers.connections import ConnectionConfigError, _get_connection, mask

#: URI schemes of the object stores a location may name (S3 and S3-compatible stores).
S3_SCHEMES = ("s3", "s3a")
#: URI schemes of HDFS. It takes no Airflow connection: the NameNode's address is in the URI (or, for an HA
#: nameservice, in ``$HADOOP_CONF_DIR``), and the user is the process's own (or ``$HADOOP_USER_NAME``).
HDFS_SCHEMES = ("hdfs",)


@dataclass(frozen=True)
class S3Settings:
    """What reaching an S3 or S3-compatible store takes; the secrets are left out of ``repr``."""

    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint: str | None = None
    region: str | None = None
    #: ``bucket.host/key`` requests instead of ``host/bucket/key`` (``object_store``'s default, which most
    #: S3-compatible stores need; AWS serves both).
    virtual_hosted: bool = False
    #: The prefixes a location on the store must lie under (extra ``allowed_roots``); empty: anywhere.
    allowed_roots: tuple[str, ...] = ()

    def secrets(self) -> list[str]:
        """The values a log must never show."""
        return [v for v in (self.secret_access_key, self.session_token) if v]

    def obstore_args(self) -> tuple[dict[str, str], dict[str, str]]:
        """``(config, client_options)`` of an obstore store: the client's options (plain HTTP) apart."""
        config = self.object_store_options()
        client = {"allow_http": config.pop("aws_allow_http")} if "aws_allow_http" in config else {}
        return config, client

    def object_store_options(self) -> dict[str, str]:
        """Options for ``object_store`` in one mapping, as delta-rs takes them (``storage_options``)."""
        options = {
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
            "aws_session_token": self.session_token,
            "aws_endpoint": self.endpoint,
            "aws_region": self.region,
        }
        out = {k: v for k, v in options.items() if v}
        out["aws_virtual_hosted_style_request"] = "true" if self.virtual_hosted else "false"
        if self.endpoint and self.endpoint.lower().startswith("http://"):
            out["aws_allow_http"] = "true"
        return out

    def hadoop_options(self) -> dict[str, str]:
        """The settings for Spark's S3A connector (``fs.s3a.*``, which also serves ``s3://``) but its secrets.

        Nothing here is secret: it may go on a spark-submit command line.
        """
        options = {
            # Hadoop maps only s3a:// to S3A; delta-rs and the pipeline file accept s3:// as the same store.
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.path.style.access": "false" if self.virtual_hosted else "true",
        }
        if self.session_token:
            options["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        if self.endpoint:
            options["fs.s3a.endpoint"] = self.endpoint
            plain = self.endpoint.lower().startswith("http://")
            options["fs.s3a.connection.ssl.enabled"] = "false" if plain else "true"
        if self.region:
            options["fs.s3a.endpoint.region"] = self.region
        return options

    def hadoop_secrets(self) -> dict[str, str]:
        """The S3A credentials (``fs.s3a.access.key`` ...); empty without a key pair, when S3A's own chain
        applies (environment, instance profile)."""
        secrets = {}
        if self.access_key_id and self.secret_access_key:
            secrets["fs.s3a.access.key"] = self.access_key_id
            secrets["fs.s3a.secret.key"] = self.secret_access_key
        if self.session_token:
            secrets["fs.s3a.session.token"] = self.session_token
        return secrets


def s3_settings(conn_id: str, *, get_connection: Callable[[str], Any] = _get_connection) -> S3Settings:
    """The S3 settings of the Airflow connection ``conn_id``; raises :class:`ConnectionConfigError` naming
    the connection and the field when one is malformed."""
    conn = get_connection(conn_id)
    extra = conn.extra_dejson or {}
    if not isinstance(extra, dict):
        raise ConnectionConfigError(f"Airflow connection {conn_id!r}: expected its extra to be a JSON object")
    service = ((extra.get("service_config") or {}).get("s3") or {}) if isinstance(extra.get("service_config"),
                                                                                  dict) else {}  # fmt: skip
    kwargs = extra.get("config_kwargs") or {}
    style = ((kwargs.get("s3") or {}) if isinstance(kwargs, dict) else {}).get("addressing_style", "auto")
    if style not in ("auto", "path", "virtual"):
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r}: extra config_kwargs.s3.addressing_style is {style!r}; expected "
            "'path', 'virtual' or 'auto'"
        )
    key = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    if bool(key) != bool(secret):
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r}: has an access key id but no secret access key, or the other way "
            "round; set both (login and password) or neither (the worker's own AWS credentials)"
        )
    return S3Settings(
        access_key_id=str(key) if key else None,
        secret_access_key=str(secret) if secret else None,
        session_token=extra.get("aws_session_token") or None,
        endpoint=service.get("endpoint_url") or extra.get("endpoint_url") or None,
        region=extra.get("region_name") or None,
        virtual_hosted=style == "virtual",
        allowed_roots=_allowed_roots(conn_id, extra.get("allowed_roots")),
    )


def _allowed_roots(conn_id: str, value: Any) -> tuple[str, ...]:
    """The extra's ``allowed_roots``: a list of ``s3://bucket[/prefix]`` URIs (or one, or a comma-separated
    text of them); raises :class:`ConnectionConfigError` naming the connection and the entry."""
    if value is None:
        return ()
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r}: extra allowed_roots is {value!r}; expected a list of "
            "s3://bucket/prefix URIs"
        )
    roots = []
    for item in items:
        if not isinstance(item, str) or scheme_of(item) not in S3_SCHEMES or not item.partition("://")[2].split("/")[0]:
            raise ConnectionConfigError(
                f"Airflow connection {conn_id!r}: extra allowed_roots holds {item!r}; expected an "
                "s3://bucket/prefix URI (s3a:// reads the same)"
            )
        roots.append(item)
    return tuple(roots)


def check_allowed(conn_id: str, settings: S3Settings, what: str, location: str) -> None:
    """Refuse (:class:`ConnectionConfigError`) ``location`` (``what`` names it, ``tables.bronze_path``) when the
    connection's ``allowed_roots`` do not hold it, compared by what they resolve to (``s3a://`` is ``s3://``,
    a bucket in capitals is the bucket, ``..`` is resolved)."""
    if not settings.allowed_roots:
        return
    if any(is_within(comparable(location), comparable(root)) for root in settings.allowed_roots):
        return
    raise ConnectionConfigError(
        f"{what} {location!r} lies outside the allowed_roots of Airflow connection {conn_id!r} "
        f"({', '.join(settings.allowed_roots)}); move it under one of them in the pipeline file, or ask the "
        "connection's owner to add its prefix to allowed_roots"
    )


def _on_s3(what: str, location: str) -> bool:
    """Whether ``location`` is on S3 (``False``: a local path or HDFS, which take no connection); any other
    store raises :class:`ConnectionConfigError` naming ``what`` and the fix: no other store is tested."""
    scheme = scheme_of(location)
    if scheme is None or scheme in HDFS_SCHEMES:
        return False
    if scheme not in S3_SCHEMES:
        raise ConnectionConfigError(
            f"{what} {location!r} is on a {scheme}:// store, which this version cannot reach yet (only S3 "
            f"and S3-compatible stores, {' or '.join(s + '://' for s in S3_SCHEMES)}, HDFS (hdfs://) and "
            "filesystems); move it to an s3a:// or hdfs:// location or to a folder every Airflow worker and "
            "Spark node mounts"
        )  # fmt: skip
    return True


def _masked_settings(conn_id: str, get_connection: Callable[[str], Any]) -> S3Settings:
    settings = s3_settings(conn_id, get_connection=get_connection)
    for secret in settings.secrets():
        mask(secret)
    return settings


def store_settings(locations: Mapping[str, str], conn_id: str, *,
                   get_connection: Callable[[str], Any] = _get_connection) -> S3Settings | None:  # fmt: skip
    """The S3 settings that reach ``locations`` (what each is -> where), their secrets masked in task logs;
    ``None`` when every one is a local path, and no connection is looked up then. A location on another
    store raises :class:`ConnectionConfigError` naming it and the fix."""
    on_s3 = {what: location for what, location in locations.items() if _on_s3(what, location)}
    if not on_s3:
        return None
    settings = _masked_settings(conn_id, get_connection)
    for what, location in on_s3.items():
        check_allowed(conn_id, settings, what, location)
    return settings


def location_options(location: str, conn_id: str, *, what: str = "location",
                     get_connection: Callable[[str], Any] = _get_connection) -> dict[str, str] | None:  # fmt: skip
    """delta-rs ``storage_options`` for ``location``: ``None`` for a local path or HDFS, the S3 settings of the Airflow
    connection ``conn_id`` for an ``s3a://`` or ``s3://`` URI (see :func:`store_settings`)."""
    settings = store_settings({what: location}, conn_id, get_connection=get_connection)
    return None if settings is None else settings.object_store_options()


class TableOptions:
    """How one pipeline reaches each of its locations, by its key in ``tables`` (``"bronze_path"``).

    The connection ``tables.storage_connection_id`` is looked up at the first location on an object store,
    and kept: a lookup is a round trip to Airflow's metadata database or API, so one of these serves a whole
    task (or page view). A pipeline whose locations are all local never looks a connection up. A failed
    lookup is kept by nobody: the next location on the store asks again.
    """

    def __init__(self, cfg: Any, *, get_connection: Callable[[str], Any] | None = None) -> None:
        """``cfg``: a :class:`~include.config.PipelineConfig`; ``get_connection``: how to look the connection
        up (default: the Task SDK's, as in a task)."""
        self._cfg = cfg
        self._get_connection = get_connection or _get_connection
        self._settings: S3Settings | None = None

    def settings(self, key: str) -> S3Settings | None:
        """The S3 settings that reach ``tables.<key>``; ``None`` for a local path or HDFS."""
        location = getattr(self._cfg.tables, key)
        if not _on_s3(f"tables.{key}", location):
            return None
        conn_id = self._cfg.tables.storage_connection_id
        if self._settings is None:
            self._settings = _masked_settings(conn_id, self._get_connection)
        check_allowed(conn_id, self._settings, f"tables.{key}", location)
        return self._settings

    def __call__(self, key: str) -> dict[str, str] | None:
        """delta-rs ``storage_options`` of ``tables.<key>``: ``None`` for a local path or HDFS (no options needed)."""
        settings = self.settings(key)
        return None if settings is None else settings.object_store_options()
