"""Walk a repository and embed its text files in chunks so later queries hit the cache.

Rules (issue 3): only under the operator's allowed roots, after resolving the path; symlinks are
never followed (a link whose target is outside the repo is counted as `symlink_outside`, one inside
as `symlink`: its target is read under its own name); `.git/` is skipped; every `.gitignore` on the
way down is honoured (pathspec's gitignore rules, each file relative to its own folder); binary
files (a NUL byte), files over 1 MiB, non-regular files and non-UTF-8 files are skipped by reason.
Files are opened with O_NOFOLLOW so a file swapped for a link after the walk is not read either.
"""
from __future__ import annotations

import asyncio
import os
import stat
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pathspec

from vramkit.core.embed_keys import MAX_FILE_BYTES, chunk_text, decode_text, skip_reason
from vramkit.embed.requests import BadRequest


def resolve_repo(path: str, roots: list[Path]) -> Path:
    """The resolved repo folder, or a 4xx naming what to change."""
    if not isinstance(path, str) or not path:
        raise BadRequest(422, "'path' must be the repository folder as a string", "path")
    if not roots:
        raise BadRequest(403, "precache is off: no allowed roots configured; the operator sets "
                              "VRAMKIT_EMBED_ALLOWED_ROOTS", "path")
    p = Path(path).expanduser()
    if not p.is_absolute():
        raise BadRequest(422, f"{path!r} is relative: send an absolute path under "
                              f"{', '.join(map(str, roots))}", "path")
    real = p.resolve()
    if not any(real == r or real.is_relative_to(r) for r in roots):
        raise BadRequest(403, f"{path} resolves to {real}, outside the allowed roots "
                              f"({', '.join(map(str, roots))}): send a path inside them", "path")
    if not real.is_dir():
        raise BadRequest(404, f"{real} is not a folder: send a repository folder", "path")
    return real


@dataclass
class WalkResult:
    files: list[Path] = field(default_factory=list)     # regular files to read
    seen: int = 0                                       # files and links met, ignored ones included
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def _inside(root: Path, target: Path) -> bool:
    return target == root or target.is_relative_to(root)


def _load_gitignore(folder: Path) -> pathspec.PathSpec | None:
    gi = folder / ".gitignore"
    if not gi.is_file() or gi.is_symlink():
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(gi.read_text(errors="replace").splitlines())
    except OSError:
        return None


def walk_repo(root: Path, roots: list[Path] | None = None) -> WalkResult:
    """Files under `root` to read. `.gitignore` files of the folders above `root` count too, as in
    git, but only those inside the allowed `roots` (nothing outside them is read)."""
    out = WalkResult()
    specs: list[tuple[Path, pathspec.PathSpec]] = []   # (folder, its .gitignore rules)
    for folder in reversed(root.parents):
        if roots and any(folder == r or folder.is_relative_to(r) for r in roots):
            spec = _load_gitignore(folder)
            if spec:
                specs.append((folder, spec))

    def ignored(path: Path, is_dir: bool) -> bool:
        hit = False
        for folder, spec in specs:
            if _inside(folder, path) and path != folder:
                rel = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
                res = spec.check_file(rel)
                if res.include is not None:   # later (deeper) files override earlier ones
                    hit = bool(res.include)
        return hit

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        specs = [(f, s) for f, s in specs if _inside(f, here)]   # drop siblings
        spec = _load_gitignore(here)
        if spec:
            specs.append((here, spec))
        keep = []
        for d in sorted(dirnames):
            full = here / d
            if d == ".git":
                continue
            if full.is_symlink():
                out.seen += 1
                out.skip("symlink" if _inside(root, full.resolve()) else "symlink_outside")
            elif ignored(full, True):
                out.skip("gitignored_dir")
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            full = here / name
            out.seen += 1
            if full.is_symlink():
                out.skip("symlink" if _inside(root, full.resolve()) else "symlink_outside")
            elif ignored(full, False):
                out.skip("gitignored")
            else:
                out.files.append(full)
    return out


def read_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> tuple[str | None, str | None]:
    """(text, None) or (None, skip reason). Never follows a link, never reads past the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        return None, "symlink" if err.errno == 40 else "unreadable"   # 40 = ELOOP: became a link
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "not_regular"
        head = fh.read(8192)
        reason = skip_reason(st.st_size, head, max_bytes)
        if reason:
            return None, reason
        data = head + fh.read(max_bytes + 1 - len(head))
    if len(data) > max_bytes:
        return None, "too_large"
    if b"\x00" in data:
        return None, "binary"
    text = decode_text(data)
    if text is None:
        return None, "undecodable"
    return text, None


@dataclass
class PrecacheJob:
    root: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "walking"          # walking -> embedding -> done | failed
    files_seen: int = 0
    files_total: int = 0            # files that passed the walk and will be read
    files_done: int = 0
    files_embedded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    error: str = ""

    def report(self) -> dict:
        return asdict(self)


async def run_precache(job: PrecacheJob, embed, batch_chunks: int = 64,
                       walked: asyncio.Event | None = None,
                       roots: list[Path] | None = None) -> PrecacheJob:
    """Fill `job` as it goes. `embed(texts) -> cache hits` is the service's cache-then-encode."""
    t0 = time.perf_counter()
    try:
        walk = await asyncio.to_thread(walk_repo, Path(job.root), roots)
        job.files_seen, job.files_total = walk.seen, len(walk.files)
        job.skipped = dict(walk.skipped)
        job.state = "embedding"
        if walked:
            walked.set()
        batch: list[str] = []

        async def flush() -> None:
            if batch:
                hits = await embed(list(batch))
                job.cache_hits += hits
                batch.clear()

        for path in walk.files:
            text, reason = await asyncio.to_thread(read_file, path)
            job.files_done += 1
            if reason:
                job.skipped[reason] = job.skipped.get(reason, 0) + 1
                continue
            pieces = chunk_text(text)
            if not pieces:
                job.skipped["empty"] = job.skipped.get("empty", 0) + 1
                continue
            job.files_embedded += 1
            job.chunks += len(pieces)
            for piece in pieces:
                batch.append(piece)
                if len(batch) >= batch_chunks:
                    await flush()
            job.seconds = round(time.perf_counter() - t0, 3)
        await flush()
        job.state = "done"
    except Exception as err:  # noqa: BLE001 - reported on the job, the service goes on
        job.state, job.error = "failed", f"{type(err).__name__}: {err}"
    finally:
        job.seconds = round(time.perf_counter() - t0, 3)
        if walked:
            walked.set()
    return job
