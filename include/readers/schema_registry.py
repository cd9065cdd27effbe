"""A client of a Confluent-compatible schema registry's REST API, and the wire format it implies.

Only what the transform needs: a subject's version (the reader schema) and a
schema by its global id (each record's writer schema). It talks HTTP with the
standard library, so the Spark driver needs nothing beyond the project's code.
Any registry with Confluent's API answers: Confluent Schema Registry itself,
Apicurio Registry (under ``/apis/ccompat/v7``), Karapace, Redpanda.

The Confluent wire format: byte 0 is the magic byte ``0``, bytes 1–4 the
writer schema's id (big-endian), then the payload (Avro binary, JSON text
for JSON Schema, or for Protobuf the message-index path and the message).

A Protobuf schema may import other files: the registry answers their names
(as the ``import`` line writes them) with the subject and version holding
each (``references``); :func:`referenced_texts` reads them all.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from include.contract.errors import ContractError, PipelineError

#: The wire format's header: magic byte, then the 4-byte schema id.
MAGIC = 0
HEADER_BYTES = 5
#: How deep references may nest (a file importing a file importing ...) before the read is refused.
MAX_REFERENCE_DEPTH = 16


class SchemaRegistryError(PipelineError, RuntimeError):
    """The registry could not be reached, or refused; the message names the URL, what was asked and its answer."""

    def __init__(self, message: str, *, status: int | None = None, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one imports: its name in the importing schema (a Protobuf import path) and where
    the registry holds it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as the registry holds it."""

    id: int
    schema: str
    schema_type: str = "AVRO"
    subject: str | None = None
    version: int | None = None
    references: tuple[SchemaReference, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """What a silver commit records of the schema it read with (not the schema text)."""
        return {"subject": self.subject, "version": self.version, "id": self.id, "type": self.schema_type}


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` in the Confluent wire format under ``schema_id``."""
    return struct.pack(">bI", MAGIC, schema_id) + payload


def unframe(value: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a value in the Confluent wire format; ``ValueError`` when it is not."""
    if len(value) < HEADER_BYTES or value[0] != MAGIC:
        raise ContractError(
            f"expected the Confluent wire format (magic byte 0, a 4-byte schema id, then the payload), got "
            f"{len(value)} bytes starting with {value[:HEADER_BYTES].hex() or 'nothing'}"
        )
    return struct.unpack(">I", value[1:HEADER_BYTES])[0], value[HEADER_BYTES:]


#: ``(url, headers, timeout) -> (status, body)``; replaced in unit tests by recorded answers.
Transport = Callable[[str, dict[str, str], float], tuple[int, bytes]]


#: The most bytes of one registry answer read: a schema is kilobytes; a bigger answer is not a registry's.
MAX_ANSWER_BYTES = 16 << 20


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a registry's redirects only to the same scheme, host and port (or from http to https on the same
    host): the request carries the connection's credentials, which another host, or plain http, must not see."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = urllib.parse.urljoin(req.full_url, newurl)
        (old_scheme, old_host, old_port), (new_scheme, new_host, new_port) = _origin(req.full_url), _origin(new)
        upgrade = (old_scheme, new_scheme) == ("http", "https") and old_host == new_host
        if (new_scheme, new_host, new_port) != (old_scheme, old_host, old_port) and not upgrade:
            raise urllib.error.URLError(
                f"refused the registry's redirect ({code}) from {old_scheme}://{old_host} to {new_scheme}://"
                f"{new_host}: the request carries the connection's credentials; point the connection at the "
                "address that answers"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _http_get(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with _OPENER.open(request, timeout=timeout) as response:  # noqa: S310 (the user's registry URL)
            body = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(MAX_ANSWER_BYTES)
    if len(body) > MAX_ANSWER_BYTES:
        raise urllib.error.URLError(f"the answer is over {MAX_ANSWER_BYTES} bytes, more than any schema")
    return response.status, body


def shown_url(url: str) -> str:
    """``url`` with any credentials in it (``user:password@``) masked, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class RegistryClient:
    """Reads schemas from one registry; every schema read is kept, as ids never change meaning."""

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 timeout: float = 10.0, transport: Transport | None = None) -> None:  # fmt: skip
        if not url.startswith(("http://", "https://")):
            raise SchemaRegistryError(f"schema registry URL {url!r}: expected http:// or https://")
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:
            # Credentials in the URL: urllib would take them for part of the host name. They are the login.
            username = username if username is not None else urllib.parse.unquote(parts.username)
            password = password if password is not None else urllib.parse.unquote(parts.password or "")
            host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
            url = urllib.parse.urlunsplit(parts._replace(netloc=host))
        self.url = url.rstrip("/")
        #: The URL as messages show it (the credentials are never in it).
        self.shown = shown_url(self.url)
        self.timeout = timeout
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._get = transport or _http_get
        self._by_id: dict[int, RegisteredSchema] = {}
        #: Subject versions by number (never ``latest``, which moves): what imports name, per writer id again.
        self._by_version: dict[tuple[str, int], RegisteredSchema] = {}

    def _call(self, path: str, what: str) -> dict[str, Any]:
        data = self._call_json(path, what)
        if not isinstance(data, dict):
            raise SchemaRegistryError(
                f"schema registry {self.shown}: {what}: expected a JSON object, got {json.dumps(data)[:200]}"
            )
        return data

    def _call_json(self, path: str, what: str) -> Any:
        url = f"{self.url}{path}"
        try:
            status, body = self._get(url, self._headers, self.timeout)
        except (OSError, urllib.error.URLError) as exc:
            raise SchemaRegistryError(
                f"schema registry {self.shown}: cannot read {what} ({self.shown}{path}): {exc}; check the registry's "
                f"connection (host, port) and that it is running"
            ) from None
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            data = {}
        if status != 200:
            code, message = (
                (data.get("error_code"), data.get("message")) if isinstance(data, dict) else (None, None)
            )
            hint = {
                401: "; check the connection's login and password",
                403: "; the connection's user may not read it",
            }
            raise SchemaRegistryError(
                f"schema registry {self.shown}: cannot read {what}: HTTP {status}"
                + (f", error {code}" if code is not None else "")
                + (f": {message}" if message else "")
                + hint.get(status, ""),
                status=status, error_code=code,
            )  # fmt: skip
        return data

    def subject_version(self, subject: str, version: int | None = None) -> RegisteredSchema:
        """``subject``'s schema at ``version``, or its latest when ``None``."""
        if version is not None and (subject, version) in self._by_version:
            return self._by_version[(subject, version)]
        shown = "latest" if version is None else str(version)
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{shown}"
        data = self._call(path, f"subject {subject!r} version {shown}")
        try:
            found = RegisteredSchema(int(data["id"]), str(data["schema"]), str(data.get("schemaType") or "AVRO"),
                                     subject, int(data["version"]), self._references(data, f"subject {subject!r}"))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            raise SchemaRegistryError(
                f"schema registry {self.shown}: subject {subject!r} version {shown}: expected id, version and "
                f"schema in the answer, got {json.dumps(data)[:200]}"
            ) from None
        self._by_id.setdefault(found.id, found)
        self._by_version[(subject, found.version or 0)] = found
        return found

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema registered under the global ``schema_id``."""
        if schema_id in self._by_id:
            return self._by_id[schema_id]
        data = self._call(f"/schemas/ids/{schema_id}", f"schema id {schema_id}")
        if "schema" not in data:
            raise SchemaRegistryError(
                f"schema registry {self.shown}: schema id {schema_id}: expected a schema in the answer, "
                f"got {json.dumps(data)[:200]}"
            )
        found = RegisteredSchema(schema_id, str(data["schema"]), str(data.get("schemaType") or "AVRO"),
                                 references=self._references(data, f"schema id {schema_id}"))  # fmt: skip
        self._by_id[schema_id] = found
        return found

    def subjects_of(self, schema_id: int) -> tuple[str, ...]:
        """The subjects the global ``schema_id`` is registered under (``/schemas/ids/<id>/versions``), sorted."""
        data = self._call_json(f"/schemas/ids/{schema_id}/versions", f"the subjects of schema id {schema_id}")
        if not isinstance(data, list) or not all(isinstance(d, dict) and "subject" in d for d in data):
            raise SchemaRegistryError(
                f"schema registry {self.shown}: the subjects of schema id {schema_id}: expected a list of "
                f"{{subject, version}}, got {json.dumps(data)[:200]}"
            )
        return tuple(sorted({str(d["subject"]) for d in data}))

    def _references(self, data: dict[str, Any], what: str) -> tuple[SchemaReference, ...]:
        refs = data.get("references") or []
        try:
            return tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in refs)
        except (KeyError, TypeError, ValueError):
            raise SchemaRegistryError(
                f"schema registry {self.shown}: {what}: expected references as name, subject and version, got "
                f"{json.dumps(refs)[:200]}"
            ) from None


def referenced_texts(client: RegistryClient, schema: RegisteredSchema) -> dict[str, str]:
    """The text of every schema ``schema`` imports, directly or not, by its import name; each is read once.

    An import name that two references place at different subjects or versions, or references nested deeper than
    :data:`MAX_REFERENCE_DEPTH`, raise :class:`SchemaRegistryError` naming them.
    """
    texts: dict[str, str] = {}
    where: dict[str, str] = {}

    def visit(refs: tuple[SchemaReference, ...], path: tuple[str, ...]) -> None:
        if len(path) > MAX_REFERENCE_DEPTH:
            raise SchemaRegistryError(
                f"schema registry {client.url}: references nest more than {MAX_REFERENCE_DEPTH} deep: "
                + " -> ".join(path)
            )
        for ref in refs:
            at = f"subject {ref.subject!r} version {ref.version}"
            if ref.name in texts:
                if where[ref.name] != at:
                    raise SchemaRegistryError(
                        f"schema registry {client.url}: import {ref.name!r} is {where[ref.name]} in one "
                        f"reference and {at} in another; one file name must be one schema"
                    )
                continue
            found = client.subject_version(ref.subject, ref.version)
            texts[ref.name], where[ref.name] = found.schema, at
            visit(found.references, (*path, ref.name))

    visit(schema.references, (f"schema id {schema.id}",))
    return texts


def is_not_found(exc: SchemaRegistryError) -> bool:
    """Whether the registry said the schema or subject does not exist (rather than failing)."""
    return exc.status == 404
