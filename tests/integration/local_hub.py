"""A local HTTP server that speaks the Hugging Face Hub's file API, enough for huggingface_hub's downloads.

Not a mock of vramkit's code: the real huggingface_hub (the kit's adapter, `vramkit pull`, `vramkit plan
--model owner/name`) talks HTTP to it with HF_ENDPOINT pointing here. It serves what the library asks for:
- GET /api/models/{owner}/{name}/revision/{rev}: the repo's commit (`sha`) and files (`siblings`);
- GET /api/models/{owner}/{name}/tree/{rev}[/...]: the file listing (path, size, oid);
- HEAD/GET /{owner}/{name}/resolve/{rev}/{file}: the file, with X-Repo-Commit, ETag and Content-Length, and
  byte ranges (206) for resumed downloads;
- 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound, as the Hub answers.
`drop_after[file] = n`: the next GET of that file sends n bytes and closes the connection; further GETs of it
answer 503 until `drop_after` is cleared (a pull that broke off midway). Every request is logged.
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class LocalHub:
    def __init__(self, repos: dict[str, dict[str, bytes]], commit: str = "c0ffee" + "0" * 34):
        self.repos = repos
        self.commit = commit
        self.log: list[tuple[str, str, str | None]] = []     # (method, path, Range header)
        self.drop_after: dict[str, int] = {}
        self._dropped: set[str] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):      # quiet
                pass

            def do_HEAD(self):
                hub._serve(self, head=True)

            def do_GET(self):
                hub._serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------------------------------------
    def _error(self, h, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h, data, head: bool) -> None:
        body = json.dumps(data).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _repo(self, parts: list[str]) -> tuple[str | None, list[str]]:
        if len(parts) >= 2 and f"{parts[0]}/{parts[1]}" in self.repos:
            return f"{parts[0]}/{parts[1]}", parts[2:]
        return None, parts[2:]

    def _serve(self, h, head: bool) -> None:
        url = urlparse(h.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        self.log.append(("HEAD" if head else "GET", url.path, h.headers.get("Range")))
        if parts[:2] == ["api", "models"]:
            repo, rest = self._repo(parts[2:])
            if repo is None:
                return self._error(h, 404, "RepoNotFound")
            if not rest:                        # /api/models/{repo}: the default branch's info
                rest = ["revision", "main"]
            if len(rest) < 2 or rest[1] not in ("main", self.commit):
                return self._error(h, 404, "RevisionNotFound")
            files = self.repos[repo]
            if rest[0] == "revision":
                return self._json(h, {"id": repo, "modelId": repo, "sha": self.commit, "private": False,
                                      "siblings": [{"rfilename": f} for f in files]}, head)
            if rest[0] == "tree":
                return self._json(h, [{"type": "file", "path": f, "size": len(b),
                                       "oid": hashlib.sha1(b).hexdigest()} for f, b in files.items()], head)
            return self._error(h, 404, "EntryNotFound")
        repo, rest = self._repo(parts)
        if repo is None or len(rest) < 3 or rest[0] != "resolve":
            return self._error(h, 404, "RepoNotFound")
        if rest[1] not in ("main", self.commit):
            return self._error(h, 404, "RevisionNotFound")
        name = "/".join(rest[2:])
        if name not in self.repos[repo]:
            return self._error(h, 404, "EntryNotFound")
        data = self.repos[repo][name]
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng.removeprefix("bytes=").split("-")[0])
        if not head and name in self.drop_after and name in self._dropped:
            return self._error(h, 503, "Unavailable")
        body = data[start:]
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", self.commit)
        h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        if name in self.drop_after:
            self._dropped.add(name)
            h.wfile.write(body[:self.drop_after[name]])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(body)

    def heal(self) -> None:
        self.drop_after.clear()
        self._dropped.clear()

    def served_ranges(self, name: str) -> list[str | None]:
        return [r for m, p, r in self.log if m == "GET" and p.endswith("/" + name)]
