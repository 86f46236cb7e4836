"""A minimal Confluent schema registry client and the Confluent wire format.

The decoder runs on Spark executors, so the client is stdlib only (`urllib.request`) and small
enough to pickle. It separates the two kinds of failure the streamer treats differently:
"the registry says this schema does not exist" (a bad record) is `None`, while "the registry did
not answer properly" (unreachable, timeout, HTTP 5xx, a wrong URL) raises `SchemaRegistryError`,
so the batch fails and is retried rather than quarantining good records. Messages name the
registry URL but never the credentials.
"""

from __future__ import annotations

import base64
import http.client
import json
import struct
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from streamer.decode.decoded import UndecodableRecordError
from streamer.errors import SchemaRegistryError, UnsupportedSchemaTypeError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
AVRO = "AVRO"

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403

_MAGIC_BYTE = 0
_HEADER = struct.Struct(">BI")
CONFLUENT_HEADER_SIZE = _HEADER.size
"""Magic byte 0 and the big-endian 4-byte schema id before the Avro payload."""


class SchemaRegistryClient:
    """Reads and registers schemas. `basic_auth_user_info` is Confluent's `"user:password"`;
    credentials in the URL (`http://user:pw@host`) are used the same way and removed from it."""

    def __init__(self, url: str, basic_auth_user_info: str | None = None, timeout: float = 10):
        parts = urlsplit(url.rstrip("/"))
        if parts.username is not None and basic_auth_user_info is None:
            basic_auth_user_info = f"{parts.username}:{parts.password or ''}"
        self.url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self.timeout = timeout
        self._headers = {"Accept": f"{CONTENT_TYPE}, application/json"}
        if basic_auth_user_info:
            token = base64.b64encode(basic_auth_user_info.encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"

    def __repr__(self) -> str:
        return f"SchemaRegistryClient({self.url!r})"

    def schema_by_id(self, schema_id: int) -> str | None:
        """The Avro schema text registered under `schema_id`, or None when the registry has no
        such id. A schema of another type raises `UnsupportedSchemaTypeError`."""
        answer = self._call("GET", f"/schemas/ids/{schema_id}", missing=(SCHEMA_NOT_FOUND,))
        if answer is None:
            return None
        return _avro_text(answer, f"schema id {schema_id}")

    def latest_schema(self, subject: str) -> tuple[int, str]:
        """(id, Avro schema text) of the subject's latest version."""
        answer = self._call(
            "GET",
            f"/subjects/{quote(subject, safe='')}/versions/latest",
            missing=(SUBJECT_NOT_FOUND, VERSION_NOT_FOUND),
        )
        if answer is None:
            raise SchemaRegistryError(f"schema registry {self.url} has no subject {subject!r}")
        return answer["id"], _avro_text(answer, f"subject {subject!r}")

    def subjects(self) -> list[str]:
        """Every subject the registry holds: the cheapest question that proves it answers."""
        return self._call("GET", "/subjects")

    def register(self, subject: str, schema_str: str, schema_type: str = AVRO) -> int:
        """Registers the schema under the subject (a no-op if it is there already); its id."""
        body: dict[str, Any] = {"schema": schema_str}
        if schema_type != AVRO:
            body["schemaType"] = schema_type
        answer = self._call("POST", f"/subjects/{quote(subject, safe='')}/versions", body=body)
        return answer["id"]

    def _call(self, method: str, path: str, body: Any = None, missing: tuple[int, ...] = ()) -> Any:
        """The JSON answer; None for a 404 whose Confluent error code is in `missing`."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers, **({"Content-Type": CONTENT_TYPE} if data is not None else {}))
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        what = f"schema registry {self.url}: {method} {path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            code, message = _error_of(e)
            if e.code == 404 and code in missing:
                return None
            raise SchemaRegistryError(f"{what} failed: HTTP {e.code}: {message}") from None
        except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError
            reason = getattr(e, "reason", e)
            raise SchemaRegistryError(f"{what} failed: {reason}") from None


def _avro_text(answer: dict[str, Any], what: str) -> str:
    """The schema text of a registry answer; Confluent omits `schemaType` for Avro."""
    schema_type = answer.get("schemaType", AVRO)
    if schema_type != AVRO:
        raise UnsupportedSchemaTypeError(f"{what} is a {schema_type} schema, not {AVRO}", schema_type)
    return answer["schema"]


def _error_of(error: urllib.error.HTTPError) -> tuple[int | None, str]:
    """(Confluent error_code, message) of an error response, or (None, the body's start)."""
    text = error.read().decode("utf-8", "replace")
    try:
        answer = json.loads(text)
        return answer.get("error_code"), answer.get("message", text)
    except (ValueError, AttributeError):
        return None, text[:200] or error.reason


def confluent_frame(schema_id: int, avro_payload: bytes) -> bytes:
    """A record in Confluent's wire format, as Confluent's Avro serializer writes it."""
    return _HEADER.pack(_MAGIC_BYTE, schema_id) + avro_payload


def confluent_schema_id(record: bytes) -> int:
    """The schema id of a record in Confluent's wire format; `UndecodableRecordError` saying why
    it is not."""
    if len(record) < CONFLUENT_HEADER_SIZE:
        raise UndecodableRecordError(
            f"not in Confluent wire format: {len(record)} bytes, shorter than the {CONFLUENT_HEADER_SIZE}-byte header"
        )
    magic, schema_id = _HEADER.unpack_from(record)
    if magic != _MAGIC_BYTE:
        raise UndecodableRecordError(f"not in Confluent wire format: first byte 0x{record[0]:02x}, expected 0x00")
    return schema_id
