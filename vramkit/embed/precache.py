"""Walk a repository and embed its text files in chunks so later queries hit the cache.

Rules (issues 3 and 10): only under the operator's allowed roots, after resolving the path; `.git/`
is skipped; every `.gitignore` on the way down is honoured (pathspec's gitignore rules, each file
relative to its own folder). Every other file is embedded or skipped with its reason, never an error
of the whole job: `symlink` / `symlink_outside` / `symlink_loop` / `symlink_dangling` (links are never
followed), `fifo`, `device`, `socket`, `binary` (a NUL byte), `too_large` (over the per-file cap),
`gitignore_too_large` (a folder whose .gitignore is over GITIGNORE_MAX_BYTES: skipped whole),
`undecodable` (not UTF-8), `empty`, `unreadable`, `unreadable_dir`, `vanished` (gone since the
walk saw it), `changed` (replaced by another file or a link since the walk saw it).

Nothing is opened by a path string: the job holds a descriptor of the repository folder, reached
from the allowed root one component at a time with O_NOFOLLOW, and every folder and file below it
is opened relative to its parent's descriptor the same way (`os.open(name, dir_fd=...)`, i.e.
openat), then checked to be the same inode the walk saw. A folder swapped for a link mid-walk
fails to open (ELOOP/ENOTDIR) and is counted as `changed`: the walk cannot leave the root.
"""
from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pathspec

from vramkit.embed.keys import MAX_FILE_BYTES, chunk_text, decode_text, skip_reason
from vramkit.embed.requests import BadRequest

NAME_MAX_BYTES = 255      # Linux NAME_MAX
PATH_MAX_BYTES = 4095     # Linux PATH_MAX less the NUL
EXAMPLES_PER_REASON = 3   # paths kept per skip reason, so a report says which files
GITIGNORE_MAX_BYTES = 32 << 10   # issue 20 item 7: a 540 KB .gitignore took seconds of the GIL to compile
                                 # and pushed cached-hit p99 to 339 ms; real ones are a few KB. A folder
                                 # with a bigger one is skipped whole (`gitignore_too_large`): its rules
                                 # might exclude anything in it
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def shown(path: object) -> str:
    """A path as report text: a name that is not UTF-8 (Latin-1 `caf\xe9.py`) is written with backslash
    escapes, never the lone surrogates that no JSON encoder takes (issue 20 item 3: orjson refused them
    and the whole precache answered 500)."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def _check_path_text(path) -> None:
    if not isinstance(path, str) or not path:
        raise BadRequest(422, "'path' must be the repository folder as a string", "path")
    if "\x00" in path:
        raise BadRequest(422, "'path' contains a NUL byte, which no file name can hold: send the "
                              "folder's real path", "path")
    raw = path.encode("utf-8", "surrogatepass")
    if len(raw) > PATH_MAX_BYTES:
        raise BadRequest(422, f"'path' is {len(raw)} bytes; paths are at most {PATH_MAX_BYTES}: "
                              "send the repository folder's path", "path")
    longest = max(len(p.encode("utf-8", "surrogatepass")) for p in path.split("/"))
    if longest > NAME_MAX_BYTES:
        raise BadRequest(422, f"a component of 'path' is {longest} bytes; names are at most "
                              f"{NAME_MAX_BYTES}: send the repository folder's path", "path")


def _containing_root(real: Path, roots: list[Path]) -> Path | None:
    inside = [r for r in roots if real == r or real.is_relative_to(r)]
    return max(inside, key=lambda r: len(r.parts)) if inside else None


def _open_under(base: Path, parts: tuple[str, ...], last_is_dir: bool = True) -> int:
    """A descriptor of base/parts..., each component opened relative to the one before with
    O_NOFOLLOW (a link anywhere below `base` raises ELOOP or ENOTDIR). `base` itself is the
    operator's allowed root (or, without roots, the folder a test names)."""
    fd = os.open(base, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            nxt = os.open(name, _FILE_FLAGS if last and not last_is_dir else _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def resolve_repo(path, roots: list[Path]) -> Path:
    """The resolved repo folder, or a 4xx naming what to change (never a 500)."""
    _check_path_text(path)
    if not roots:
        raise BadRequest(403, "precache is off: no allowed roots configured; the operator sets "
                              "VRAMKIT_EMBED_ALLOWED_ROOTS", "path")
    p = Path(path)
    if not p.is_absolute():
        raise BadRequest(422, f"{path!r} is relative: send an absolute path under "
                              f"{', '.join(map(str, roots))}", "path")
    try:
        real = p.resolve()
    except RuntimeError:   # Python 3.11: "Symlink loop from ..."
        raise BadRequest(422, f"{path} is a symlink loop: send a real folder", "path") from None
    except OSError as err:
        raise BadRequest(422, f"{path} cannot be resolved ({err.strerror}): send a real folder",
                         "path") from None
    root = _containing_root(real, roots)
    if root is None:
        raise BadRequest(403, f"{path} resolves to {real}, outside the allowed roots "
                              f"({', '.join(map(str, roots))}): send a path inside them", "path")
    try:
        os.close(_open_under(root, real.relative_to(root).parts))
    except OSError as err:
        if err.errno == errno.EACCES:
            raise BadRequest(403, f"{real} is not readable by the service: grant it read access "
                                  "or send another folder", "path") from None
        if err.errno == errno.ELOOP:
            raise BadRequest(422, f"{path} is a symlink loop: send a real folder", "path") from None
        raise BadRequest(404, f"{real} is not a folder: send a repository folder", "path") from None
    return real


@dataclass
class WalkResult:
    files: list[Path] = field(default_factory=list)     # regular files to read
    idents: list[tuple[int, int]] = field(default_factory=list)   # (st_dev, st_ino) per file
    sizes: list[int] = field(default_factory=list)      # st_size per file at walk time
    seen: int = 0                                       # files and links met, ignored ones included
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, where: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if where is not None:
            kept = self.examples.setdefault(reason, [])
            if len(kept) < EXAMPLES_PER_REASON:
                kept.append(shown(where))


class WalkLimit(Exception):
    """The walk went past its entry or time budget; the message says which."""


def _inside(root: Path, target: Path) -> bool:
    return target == root or target.is_relative_to(root)


def _read_small(dir_fd: int, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
    """A small regular file in `dir_fd` (a .gitignore), never through a link; None otherwise."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        return fh.read(max_bytes)


class GitignoreTooLarge(Exception):
    """A .gitignore over GITIGNORE_MAX_BYTES: its folder is skipped."""


def _gitignore(dir_fd: int) -> pathspec.PathSpec | None:
    try:
        st = os.stat(".gitignore", dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) and st.st_size > GITIGNORE_MAX_BYTES:
        raise GitignoreTooLarge
    raw = _read_small(dir_fd, ".gitignore", GITIGNORE_MAX_BYTES)
    if raw is None:
        return None
    return pathspec.GitIgnoreSpec.from_lines(raw.decode("utf-8", "replace").splitlines())


def _link_reason(root: Path, full: Path) -> str:
    """Why a link is skipped. Informational only: links are never read through."""
    try:
        target = Path(os.path.realpath(full, strict=True))
    except OSError as err:
        return "symlink_loop" if err.errno == errno.ELOOP else "symlink_dangling"
    return "symlink" if _inside(root, target) else "symlink_outside"


_KIND = ((stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device"),
         (stat.S_ISSOCK, "socket"))


def walk_repo(root: Path, roots: list[Path] | None = None, max_entries: int | None = None,
              deadline: float | None = None) -> WalkResult:
    """Files under `root` to read, by descriptors (see the module docstring). `.gitignore` files of
    the folders above `root` count too, as in git, but only those inside the allowed `roots`."""
    out = WalkResult()
    base = _containing_root(root, roots) if roots else None
    specs: list[tuple[Path, pathspec.PathSpec]] = []   # (folder, its .gitignore rules)
    if base is not None:
        above = root.relative_to(base).parts
        for depth in range(len(above)):
            try:
                fd = _open_under(base, above[:depth])
            except OSError:
                continue
            try:
                spec = _gitignore(fd)
            except GitignoreTooLarge:
                out.skip("gitignore_too_large", str(base.joinpath(*above[:depth], ".gitignore")))
                return out
            finally:
                os.close(fd)
            if spec:
                specs.append((base.joinpath(*above[:depth]), spec))
        start, prefix = base, above
    else:
        start, prefix = root, ()

    def ignored(path: Path, is_dir: bool, rules) -> bool:
        hit = False
        for folder, spec in rules:
            if _inside(folder, path) and path != folder:
                rel = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
                res = spec.check_file(rel)
                if res.include is not None:   # later (deeper) files override earlier ones
                    hit = bool(res.include)
        return hit

    # folders still to visit: (parts below root, (dev, ino) seen by the parent, inherited rules)
    todo: list[tuple[tuple[str, ...], tuple[int, int] | None, list]] = [((), None, specs)]
    while todo:
        if deadline is not None and time.monotonic() > deadline:
            raise WalkLimit("the walk ran past the job's time budget (VRAMKIT_EMBED_PRECACHE_MAX_S)")
        rel, ident, rules = todo.pop()
        here = root.joinpath(*rel)
        try:
            fd = _open_under(start, prefix + rel)
        except OSError as err:
            out.skip("vanished" if err.errno == errno.ENOENT else
                     "unreadable_dir" if err.errno == errno.EACCES else "changed", str(here))
            continue
        try:
            st = os.fstat(fd)
            if ident is not None and (st.st_dev, st.st_ino) != ident:
                out.skip("changed", str(here))
                continue
            try:
                names = sorted(os.listdir(fd))
            except OSError:
                out.skip("unreadable_dir", str(here))
                continue
            try:
                spec = _gitignore(fd)
            except GitignoreTooLarge:
                out.skip("gitignore_too_large", str(here / ".gitignore"))
                continue
            if spec:
                rules = [*rules, (here, spec)]
            subdirs = []
            for name in names:
                full = here / name
                try:
                    est = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError as err:
                    out.seen += 1
                    out.skip("vanished" if err.errno == errno.ENOENT else "unreadable", str(full))
                    continue
                if stat.S_ISDIR(est.st_mode):
                    if name == ".git":
                        continue
                    if ignored(full, True, rules):
                        out.skip("gitignored_dir")
                    else:
                        subdirs.append((name, (est.st_dev, est.st_ino)))
                    continue
                out.seen += 1
                if max_entries is not None and out.seen > max_entries:
                    raise WalkLimit(f"more than {max_entries} files under {root} "
                                    "(VRAMKIT_EMBED_PRECACHE_MAX_FILES): precache a sub-folder")
                if stat.S_ISLNK(est.st_mode):
                    out.skip(_link_reason(root, full), str(full))
                elif ignored(full, False, rules):
                    out.skip("gitignored")
                elif stat.S_ISREG(est.st_mode):
                    out.files.append(full)
                    out.idents.append((est.st_dev, est.st_ino))
                    out.sizes.append(est.st_size)
                else:
                    out.skip(next((r for test, r in _KIND if test(est.st_mode)), "not_regular"),
                             str(full))
            for name, sub in reversed(subdirs):   # a stack: visit in sorted order
                todo.append((rel + (name,), sub, rules))
        finally:
            os.close(fd)
    return out


def _read_fd(fd: int, max_bytes: int, ident: tuple[int, int] | None) -> tuple[str | None, str | None]:
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, next((r for test, r in _KIND if test(st.st_mode)), "not_regular")
        if ident is not None and (st.st_dev, st.st_ino) != ident:
            return None, "changed"
        try:
            head = fh.read(8192)
            reason = skip_reason(st.st_size, head, max_bytes)
            if reason:
                return None, reason
            data = head + fh.read(max_bytes + 1 - len(head))
        except OSError:
            return None, "unreadable"
    if len(data) > max_bytes:
        return None, "too_large"
    if b"\x00" in data:
        return None, "binary"
    text = decode_text(data)
    if text is None:
        return None, "undecodable"
    return text, None


def _open_reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "vanished"
    if err.errno == errno.ELOOP:      # O_NOFOLLOW met a link as the file itself
        return "symlink"
    if err.errno == errno.ENOTDIR:    # O_DIRECTORY|O_NOFOLLOW met a link (or a file) as a folder
        return "changed"
    if err.errno == errno.ENXIO:      # a socket, or a FIFO opened the wrong way
        return "not_regular"
    return "unreadable"


def read_file(path: Path, max_bytes: int = MAX_FILE_BYTES, *, base: Path | None = None,
              ident: tuple[int, int] | None = None) -> tuple[str | None, str | None]:
    """(text, None) or (None, skip reason). Never follows a link, never reads past the cap.

    With `base`, `path` is opened from `base` one component at a time (the precache job's way);
    with `ident`, the file must still be the inode the walk saw."""
    try:
        if base is not None:
            fd = _open_under(base, path.relative_to(base).parts, last_is_dir=False)
        else:
            fd = os.open(path, _FILE_FLAGS)
    except OSError as err:
        return None, _open_reason(err)
    return _read_fd(fd, max_bytes, ident)


@dataclass
class PrecacheJob:
    root: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "walking"          # walking -> embedding -> done | failed | cancelled
    files_seen: int = 0
    files_total: int = 0            # files that passed the walk and will be read
    files_done: int = 0
    files_embedded: int = 0
    bytes_total: int = 0            # sizes (at walk time) of the files to read, cap applied
    bytes_done: int = 0             # of those, read and embedded (a big file advances chunk by chunk)
    current_file: str = ""          # the file being embedded now
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: dict[str, list[str]] = field(default_factory=dict)
    chunks: int = 0                 # chunks cut so far
    chunks_done: int = 0            # of those, embedded (cache hit or encoded)
    cache_hits: int = 0
    seconds: float = 0.0
    error: str = ""

    def report(self) -> dict:
        return asdict(self)

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        kept = self.skipped_examples.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append(shown(where))


async def run_precache(job: PrecacheJob, embed, batch_chunks: int = 64,
                       walked: asyncio.Event | None = None,
                       roots: list[Path] | None = None, max_file_bytes: int = MAX_FILE_BYTES,
                       max_entries: int | None = None, max_s: float | None = None) -> PrecacheJob:
    """Fill `job` as it goes. `embed(texts) -> cache hits` is the service's cache-then-encode.

    The job always ends: `done`, or `failed` with the reason (entry or time budget, service stop)."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + max_s if max_s else None
    root = Path(job.root)
    base = _containing_root(root, roots) if roots else root

    def check_time() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise WalkLimit(f"stopped after {max_s:.0f} s, the job's time budget "
                            "(VRAMKIT_EMBED_PRECACHE_MAX_S); what was embedded stays cached")

    try:
        walk = await asyncio.to_thread(walk_repo, root, roots, max_entries, deadline)
        job.files_seen, job.files_total = walk.seen, len(walk.files)
        job.skipped = dict(walk.skipped)
        job.skipped_examples = {k: list(v) for k, v in walk.examples.items()}
        job.bytes_total = sum(min(s, max_file_bytes) for s in walk.sizes)
        job.state = "embedding"
        if walked:
            walked.set()
        batch: list[str] = []
        owed: deque[list] = deque()   # [bytes per chunk, chunks left] per file, in batch order

        async def flush() -> None:
            if not batch:
                return
            hits = await embed(list(batch))
            job.cache_hits += hits
            n = len(batch)
            batch.clear()
            job.chunks_done += n
            while n and owed:
                per, left = owed[0]
                k = min(n, left)
                job.bytes_done += round(per * k)
                n -= k
                owed[0][1] -= k
                if owed[0][1] == 0:
                    owed.popleft()

        for path, ident, size in zip(walk.files, walk.idents, walk.sizes, strict=True):
            check_time()
            job.current_file = shown(path)
            text, reason = await asyncio.to_thread(read_file, path, max_file_bytes, base=base,
                                                   ident=ident)
            job.files_done += 1
            if reason:
                job.skip(reason, str(path))
                job.bytes_total -= min(size, max_file_bytes)
                continue
            assert text is not None       # read_file gives the text or a reason to skip
            pieces = chunk_text(text)
            if not pieces:
                job.skip("empty", str(path))
                job.bytes_done += min(size, max_file_bytes)
                continue
            job.files_embedded += 1
            job.chunks += len(pieces)
            owed.append([min(size, max_file_bytes) / len(pieces), len(pieces)])
            for piece in pieces:
                batch.append(piece)
                if len(batch) >= batch_chunks:
                    await flush()
                    check_time()
            job.seconds = round(time.perf_counter() - t0, 3)
        await flush()
        job.bytes_done = job.bytes_total
        job.current_file = ""
        job.state = "done"
    except asyncio.CancelledError:
        job.state, job.error = "failed", "the service stopped during the job: run it again"
        raise
    except WalkLimit as err:
        job.state, job.error = "failed", str(err)
    except Exception as err:  # noqa: BLE001 - reported on the job, the service goes on
        job.state, job.error = "failed", f"{type(err).__name__}: {err}"
    finally:
        job.seconds = round(time.perf_counter() - t0, 3)
        if walked:
            walked.set()
    return job
