"""A Confluent-compatible schema registry for the tests, run as its own process.

The decoder talks HTTP to the registry, so the tests give it a real HTTP server rather than a
stub inside the test process: the same client code, sockets and error paths as against
Confluent's registry (set SCHEMA_REGISTRY_URL to use a real one instead). Only the REST subset
the streamer uses is implemented:

- POST /subjects/{subject}/versions  {"schema", "schemaType"?} -> {"id"}; an identical schema gets
  the same id under any subject; ids start at 1.
- GET  /schemas/ids/{id}             -> {"schema", "schemaType" (only when not AVRO)}
- GET  /subjects/{subject}/versions/latest -> {"subject", "version", "id", "schema"}
- GET  /subjects                     -> ["subject", ...]

Errors have Confluent's shape: {"error_code": 40403, "message": "Schema not found"}.

Run: python tests/support/schema_registry_server.py --port 8081 (0 picks a free port); it prints
`schema registry listening on http://HOST:PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
AVRO = "AVRO"
READY_PREFIX = "schema registry listening on "


class Registry:
    """Schemas by id and subjects' versions (lists of ids), shared by the handler threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._schemas: list[tuple[str, str]] = []  # (schema type, text); id = index + 1
        self._ids: dict[tuple[str, str], int] = {}  # (schema type, canonical text) -> id
        self._subjects: dict[str, list[int]] = {}

    def register(self, subject: str, text: str, schema_type: str) -> int:
        canonical = _canonical(text, schema_type)
        with self._lock:
            schema_id = self._ids.get((schema_type, canonical))
            if schema_id is None:
                self._schemas.append((schema_type, text))
                schema_id = self._ids[(schema_type, canonical)] = len(self._schemas)
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def schema(self, schema_id: int) -> tuple[str, str] | None:
        with self._lock:
            return self._schemas[schema_id - 1] if 1 <= schema_id <= len(self._schemas) else None

    def latest(self, subject: str) -> tuple[int, int] | None:
        """(version, id) of the subject's latest version."""
        with self._lock:
            versions = self._subjects.get(subject)
            return (len(versions), versions[-1]) if versions else None

    def subjects(self) -> list[str]:
        with self._lock:
            return sorted(self._subjects)


def _canonical(text: str, schema_type: str) -> str:
    """What makes two registrations the same schema: for Avro the JSON, not its formatting."""
    if schema_type != AVRO:
        return text
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


class _HttpError(Exception):
    def __init__(self, status: int, error_code: int, message: str):
        super().__init__(message)
        self.status, self.error_code, self.message = status, error_code, message


def _with_type(answer: dict, schema_type: str) -> dict:
    """Confluent leaves `schemaType` out for Avro."""
    return answer if schema_type == AVRO else dict(answer, schemaType=schema_type)


class _Handler(BaseHTTPRequestHandler):
    registry: Registry  # set on the subclass made by `serve`

    def do_GET(self):
        self._answer(self._get)

    def do_POST(self):
        self._answer(self._post)

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass  # the tests' output stays readable; failures show in the client's errors

    def _answer(self, route) -> None:
        try:
            status, body = 200, route(_path_segments(self.path))
        except _HttpError as e:
            status, body = e.status, {"error_code": e.error_code, "message": e.message}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _get(self, path: list[str]):
        if path == ["subjects"]:
            return self.registry.subjects()
        if len(path) == 3 and path[:2] == ["schemas", "ids"] and path[2].isdigit():
            found = self.registry.schema(int(path[2]))
            if found is None:
                raise _HttpError(404, 40403, "Schema not found")
            schema_type, text = found
            return _with_type({"schema": text}, schema_type)
        if len(path) == 4 and path[0] == "subjects" and path[2:] == ["versions", "latest"]:
            subject = path[1]
            latest = self.registry.latest(subject)
            if latest is None:
                raise _HttpError(404, 40401, f"Subject '{subject}' not found.")
            version, schema_id = latest
            schema_type, text = self.registry.schema(schema_id)
            answer = {"subject": subject, "version": version, "id": schema_id, "schema": text}
            return _with_type(answer, schema_type)
        raise _HttpError(404, 404, "HTTP 404 Not Found")

    def _post(self, path: list[str]):
        if len(path) != 3 or path[0] != "subjects" or path[2] != "versions":
            raise _HttpError(404, 404, "HTTP 404 Not Found")
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            schema_type = request.get("schemaType", AVRO)
            return {"id": self.registry.register(path[1], request["schema"], schema_type)}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise _HttpError(422, 42201, f"Invalid schema: {e}") from None


def _path_segments(path: str) -> list[str]:
    """The URL path's segments, each percent-decoded (subjects may contain '/')."""
    return [unquote(part) for part in re.sub(r"[?#].*", "", path).strip("/").split("/")]


def serve(host: str, port: int) -> None:
    handler = type("Handler", (_Handler,), {"registry": Registry()})
    with ThreadingHTTPServer((host, port), handler) as server:
        print(f"{READY_PREFIX}http://{host}:{server.server_address[1]}", flush=True)
        server.serve_forever()


class RegistryProcess:
    """This server in a child process on a free loopback port; `url` once it answers."""

    def __init__(self, log_path: str, timeout: float = 30.0):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log_path, "w")  # noqa: SIM115 - the server's output for its whole life, closed by stop()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--port", str(port)], stdout=self._log, stderr=subprocess.STDOUT
        )
        self._wait_until_answering(log_path, timeout)

    def _wait_until_answering(self, log_path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=1):
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(log_path) as log:
                    raise RuntimeError(f"the test schema registry did not start at {self.url}:\n{log.read()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the child (its pid only), kill it if it does not exit in time."""
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    args = parser.parse_args(argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
