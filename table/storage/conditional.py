"""Conditional writes on an object store: a PUT that creates an object only if it is absent
(`If-None-Match: *`), and one that replaces it only if it is unchanged (`If-Match: <etag>`).

S3, GCS and Azure honour both; pyarrow's file systems cannot send them, so these go through
obstore (the Rust `object_store` crate) with the table's storage options. The commit lock of
optimistic concurrency on an object store (`table.storage.object_store_lock`) is built on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from table.errors import InvalidRequestError, PathExistsError

if TYPE_CHECKING:
    from table.storage.file_io import Storage


class ObjectChangedError(Exception):
    """A conditional replace found the object changed (another etag) or gone."""


class ConditionalWrites:
    """The conditional requests of one table's bucket, each one request."""

    def __init__(self, storage: Storage):
        try:
            import obstore
            from obstore.store import S3Store
        except ImportError as e:  # a plain install without it
            raise InvalidRequestError(
                f"{storage.base_uri}: conditional writes on an object store need the obstore package "
                "(pip install obstore)"
            ) from e
        from table.storage.file_io import S3Options

        scheme, _, rest = storage.base_uri.partition("://")
        if scheme not in ("s3", "s3a"):
            raise InvalidRequestError(f"{storage.base_uri}: conditional writes are made on S3-compatible stores only")
        bucket, _, prefix = rest.partition("/")
        options = S3Options.resolve(storage.options)
        config: dict[str, Any] = {"region": options.region or "us-east-1"}
        if options.access_key_id:
            config.update(access_key_id=options.access_key_id, secret_access_key=options.secret_access_key)
            if options.session_token:
                config["token"] = options.session_token
        if options.endpoint_url:
            config["endpoint"] = options.endpoint_url
        allow_http = (options.allow_http or "").lower() in ("true", "1", "yes")
        self._obstore = obstore
        self._store = S3Store(bucket, prefix=prefix or None, client_options={"allow_http": allow_http}, **config)
        self._exceptions = obstore.exceptions
        self.base_uri = storage.base_uri

    def create(self, rel: str, data: bytes) -> str:
        """Create `rel` unless it exists (PathExistsError, a FileExistsError); returns its etag."""
        try:
            result = self._obstore.put(self._store, rel, data, mode="create")
        except self._exceptions.AlreadyExistsError:
            raise PathExistsError(f"{self.base_uri}/{rel}") from None
        return str(result["e_tag"])

    def replace(self, rel: str, data: bytes, etag: str) -> str:
        """Replace `rel` if its etag is still `etag` (else ObjectChangedError); returns the new etag."""
        try:
            result = self._obstore.put(self._store, rel, data, mode={"e_tag": etag})
        except self._exceptions.PreconditionError:
            raise ObjectChangedError(f"{self.base_uri}/{rel} changed since it was read") from None
        return str(result["e_tag"])

    def read(self, rel: str) -> tuple[bytes, str, float]:
        """The object's bytes, etag and when it was last written (seconds since the epoch);
        FileNotFoundError when it is absent."""
        result = self._obstore.get(self._store, rel)
        meta = result.meta
        return bytes(result.bytes()), str(meta["e_tag"]), meta["last_modified"].timestamp()

    def delete(self, rel: str) -> None:
        """One request (a bulk delete of one key)."""
        self._obstore.delete(self._store, rel)
