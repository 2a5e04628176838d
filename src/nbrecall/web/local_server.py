"""The CLI's fast path: a running `nbrecall serve` on the same index answers `search` and `ask` for it.

A command that opens the index itself pays ~1.5-3 s before its first result (lancedb, pandas, the ONNX session;
bench/README.md); a server has all of it loaded, and a search costs it ~40 ms. So `serve` writes
`<index>/serve.json` (the address it listens on, its pid, a random instance id and a digest of the settings that
decide results), and `search` / `ask` look for it first. Standard library only: this module is imported before
anything heavy.

The file is trusted only as far as it checks out: the pid must be alive, the settings digest must equal the
command's own (another `--config`, `--extractive` against a server with an LLM, another store URL: the command
opens the index itself), the server must answer within a second and name the same instance id in the
`X-Nbrecall-Instance` header (a port reused by another program, or a newer server, is not mistaken for it). A
server that wants a token is used only when `$NBRECALL_TOKEN` holds it; HTTPS servers are not used (their
certificate would have to be trusted here). Anything else, or `NBRECALL_SERVER=off`: the command opens the index
itself, as it always did. A stale file (the server was killed) is ignored, and replaced by the next `serve`.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from nbrecall.config import Settings

SERVER_FILE = "serve.json"
INSTANCE_HEADER = "x-nbrecall-instance"
CONNECT_TIMEOUT = 1.0


class ServerUnusable(RuntimeError):
    """The server went away or answered with something else than expected: open the index instead."""


def settings_digest(settings: Settings) -> str:
    """What decides a search's or an answer's result, as a digest: every setting but where the index folder is
    and how serving, rendering and parallel work are run (those do not change a result)."""
    data = asdict(settings)
    for key in ("index_dir", "config_path", "serve", "render", "executor"):
        data.pop(key, None)
    for key in ("cache_dir", "threads", "batch_size"):  # where the model file is kept, how it is run
        data["embed"].pop(key, None)
    data["store"].pop("cache_mb", None)
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def server_file(settings: Settings) -> Path:
    return Path(settings.index_dir) / SERVER_FILE


def client_host(host: str) -> str:
    """The address to reach a server bound to `host` from this machine (a wildcard bind: loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


@dataclass
class ServerRecord:
    """What `serve` announces in `<index>/serve.json`."""

    pid: int
    host: str
    port: int
    instance: str
    settings: str
    token: bool
    tls: bool
    started_at: float

    @classmethod
    def announce(cls, settings: Settings, host: str, port: int, token: bool, tls: bool) -> ServerRecord:
        record = cls(os.getpid(), client_host(host), port, secrets.token_hex(16), settings_digest(settings), token,
                     tls, time.time())
        path = server_file(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record)) + "\n")
        os.replace(tmp, path)  # a reader sees the old file or the whole new one
        return record

    def withdraw(self, settings: Settings) -> None:
        """Remove the file if it is still this server's (a newer server on the same index keeps its own)."""
        path = server_file(settings)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("instance") == self.instance:
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def find_server(settings: Settings, env: Mapping[str, str] | None = None) -> LocalServer | None:
    """The running server on this index that can answer for these settings, or None (see the module doc)."""
    environ = os.environ if env is None else env
    if (environ.get("NBRECALL_SERVER") or "").strip().lower() in ("off", "0", "no", "false"):
        return None
    try:
        data = json.loads(server_file(settings).read_text())
        record = ServerRecord(**data)
    except (OSError, ValueError, TypeError):
        return None
    if record.tls or record.settings != settings_digest(settings) or not _alive(record.pid):
        return None
    token = (environ.get("NBRECALL_TOKEN") or "").strip() or None
    if record.token and token is None:
        return None
    return LocalServer(record, token)


class LocalServer:
    """HTTP to a running `nbrecall serve` (plain HTTP on this machine's address for it)."""

    def __init__(self, record: ServerRecord, token: str | None = None) -> None:
        self.record = record
        self.token = token

    def _request(self, method: str, path: str, params: dict[str, Any], timeout: float) -> http.client.HTTPResponse:
        query = urlencode({k: v for k, v in params.items() if v not in (None, "", False)}, doseq=True)
        conn = http.client.HTTPConnection(self.record.host, self.record.port, timeout=CONNECT_TIMEOUT)
        headers = {"Accept": "application/json, text/event-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.connect()
            conn.sock.settimeout(timeout)
            conn.request(method, f"{path}?{query}", headers=headers)
            response = conn.getresponse()
        except OSError as exc:  # refused, reset, timed out: gone or hung
            conn.close()
            raise ServerUnusable(f"{self.record.host}:{self.record.port}: {exc}") from exc
        if response.getheader(INSTANCE_HEADER) != self.record.instance or response.status != 200:
            status = response.status
            conn.close()
            raise ServerUnusable(f"{self.record.host}:{self.record.port} answered {status} for another instance"
                                 if status == 200 else f"{self.record.host}:{self.record.port} answered {status}")
        return response

    def search(self, query: str, k: int, filters: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """`/api/search`: the JSON contract (`results`) plus the hits grouped by notebook (`notebooks`)."""
        response = self._request("GET", "/api/search", {"q": query, "k": k, **filters}, timeout)
        try:
            return json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise ServerUnusable(f"search answer unreadable: {exc}") from exc
        finally:
            response.close()

    def ask(self, question: str, filters: dict[str, Any], timeout: float = 600.0) -> Iterator[dict[str, Any]]:
        """`/api/ask`: the answer's events as the server streams them (`token`, `notice`, `citation`, `done`).
        Raises ServerUnusable only before the first event (after it, the caller has printed part of an answer)."""
        response = self._request("GET", "/api/ask", {"q": question, **filters}, timeout)
        return _events(response)


def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    try:
        data: list[str] = []
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                with contextlib.suppress(ValueError):
                    yield json.loads("\n".join(data))
                data = []
    finally:
        response.close()
