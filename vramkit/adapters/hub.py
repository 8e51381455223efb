"""The Hugging Face Hub, through `huggingface_hub`: a model's config.json by its id, and whole checkpoints.

- `config_folder(repo_id, revision)`: a folder holding the model's config.json: the folder `vramkit pull`
  recorded, else the Hub's cache (~/.cache/huggingface/hub, $HF_HOME), else one small download into that
  cache. With no cache entry and no Hub (HF_HUB_OFFLINE=1, no network, a gated or private repo): one line,
  exit 26 (MODEL_UNREACHABLE). A repo or revision the Hub does not have: exit 64.
- `pull(...)`: the checkpoint SGLang loads (config, tokenizer, safetensors) into a folder of its own, the size
  said before it starts, the Hub library's progress bar, resumed where an earlier pull stopped (its
  `.incomplete` files), and recorded (`pulled_folder`) so plan, up, the compose file `up` writes and the
  systemd units use the folder instead of downloading again.

The Hub's address is `$HF_ENDPOINT` (huggingface_hub reads it; the tests point it at a local server that
speaks the Hub's file API). huggingface_hub is imported inside the functions: `vramkit plan` with a
catalogued model never loads it.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from vramkit.adapters.state import state_dir
from vramkit.errors import Exit, VramkitError
from vramkit.units import bytes2human

# an id as the Hub spells one: owner/name (letters, digits, '-', '_', '.')
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
# what SGLang loads from a checkpoint folder: config and tokenizer files, weights, the chat template, custom code
ALLOW = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja", "*.py"]


def is_repo_id(text: str) -> bool:
    """owner/name, and not a path on this machine (`./x/y`, `/x`, `x/y/z` or an existing `x/y` are paths)."""
    return bool(_REPO_ID.fullmatch(text)) and not Path(text).exists()


def models_dir() -> Path:
    """Where `vramkit pull` puts checkpoints: $VRAMKIT_MODELS_DIR, else ~/.local/share/vramkit/models."""
    root = os.environ.get("VRAMKIT_MODELS_DIR") or Path(
        os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "vramkit" / "models"
    return Path(root)


def _record_path(repo_id: str) -> Path:
    return state_dir() / "pulled" / (repo_id.replace("/", "--") + ".json")


def pulled_folder(repo_id: str, revision: str | None = None) -> Path | None:
    """The folder `vramkit pull` recorded for `repo_id` (at `revision`, when given), if it is still there."""
    path = _record_path(repo_id)
    try:
        rec = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        print(f"vramkit: warning: pull record {path} is unreadable ({e}); ignored -> pull again or remove it",
              file=sys.stderr)
        return None
    if revision and revision not in (rec.get("revision"), rec.get("commit")):
        return None
    folder = Path(rec.get("path", ""))
    return folder if (folder / "config.json").is_file() else None


def _offline() -> bool:
    from huggingface_hub import constants  # noqa: PLC0415
    return bool(constants.HF_HUB_OFFLINE)


def _cache_root() -> str:
    from huggingface_hub import constants  # noqa: PLC0415
    return str(constants.HF_HUB_CACHE)


def _unreachable(repo_id: str, why: str) -> VramkitError:
    return VramkitError(f"{repo_id}: {why}",
                        f"run `vramkit pull {repo_id}` where the Hub is reachable (or copy its folder here and give "
                        "the folder), or name a catalogued model (vramkit plan --list)", Exit.MODEL_UNREACHABLE)


def _hub_error(repo_id: str, revision: str | None, err: Exception) -> VramkitError:
    """A huggingface_hub exception -> one line. Not found: exit 64; anything that keeps us from it: exit 26."""
    from huggingface_hub.errors import (  # noqa: PLC0415 - loaded only for a Hub id
        DryRunError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    if isinstance(err, GatedRepoError):
        return _unreachable(repo_id, "the repository is gated: accept its terms on the Hub and set HF_TOKEN")
    if isinstance(err, RevisionNotFoundError):
        return VramkitError(f"{repo_id} has no revision {revision!r} on the Hub", "give a branch, tag or commit "
                            "it has (--revision)", Exit.BAD_INPUT)
    if isinstance(err, RepositoryNotFoundError):
        return VramkitError(f"no model {repo_id} on the Hub (or it is private: set HF_TOKEN)",
                            "check the id on huggingface.co, or give a local folder or a catalogued name",
                            Exit.BAD_INPUT)
    if isinstance(err, RemoteEntryNotFoundError):
        return VramkitError(f"{repo_id} has no config.json: not a transformers checkpoint SGLang loads",
                            "give the id of its safetensors repository", Exit.UNSUPPORTED_MODEL)
    if isinstance(err, LocalEntryNotFoundError | DryRunError):
        if _offline():
            return _unreachable(repo_id, f"not in the Hugging Face cache ({_cache_root()}) and HF_HUB_OFFLINE is set")
        return _unreachable(repo_id, f"not in the Hugging Face cache ({_cache_root()}) and the Hub "
                                     f"({_endpoint()}) cannot be reached")
    return _unreachable(repo_id, f"the Hub ({_endpoint()}) answered {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}")


def _endpoint() -> str:
    from huggingface_hub import constants  # noqa: PLC0415
    return str(constants.ENDPOINT)


def _check_reachable(repo_id: str) -> None:
    """One TCP connect to the Hub before asking it anything: huggingface_hub itself retries an unreachable
    host for ~23 s (1+2+4+8+8) with a warning each time; the user gets one line at once instead."""
    url = urlparse(_endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5).close()
    except OSError as e:
        raise _unreachable(repo_id, f"not in the Hugging Face cache ({_cache_root()}) and the Hub ({_endpoint()}) "
                                    f"cannot be reached ({e.strerror or type(e).__name__})") from None


def config_folder(repo_id: str, revision: str | None = None) -> Path:
    """A folder with `repo_id`'s config.json: pulled, cached, or fetched into the Hub's cache (one small file)."""
    pulled = pulled_folder(repo_id, revision)
    if pulled is not None:
        return pulled
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415
    try:          # the cache first: no request at all when it has the file
        return Path(hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=True)).parent
    except LocalEntryNotFoundError:
        pass
    except Exception as err:  # noqa: BLE001 - every library failure becomes one line
        raise _hub_error(repo_id, revision, err) from None
    if _offline():
        raise _hub_error(repo_id, revision, LocalEntryNotFoundError("offline"))
    _check_reachable(repo_id)
    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision)).parent
    except Exception as err:  # noqa: BLE001
        raise _hub_error(repo_id, revision, err) from None


@dataclass(frozen=True)
class PullPlan:
    """What a pull would fetch: every file SGLang needs, with sizes (the Hub's dry run)."""
    repo_id: str
    revision: str | None
    commit: str
    folder: Path
    files: tuple[tuple[str, int, bool], ...]     # (name, bytes, already here)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.files)

    @property
    def to_fetch_bytes(self) -> int:
        return sum(size for _, size, here in self.files if not here)

    @staticmethod
    def _size(n: int) -> str:
        return bytes2human(n, "GiB" if n >= 1 << 30 else "MiB")

    def line(self) -> str:
        have = self.total_bytes - self.to_fetch_bytes
        return (f"{self.repo_id}{'@' + self.revision if self.revision else ''} ({self.commit[:10]}): "
                f"{len(self.files)} files, {self._size(self.total_bytes)}; "
                + (f"{self._size(self.to_fetch_bytes)} to download"
                   + (f" ({self._size(have)} already here)" if have else "") if self.to_fetch_bytes
                   else "all already here")
                + f" -> {self.folder}")


def _patterns(names: list[str]) -> list[str]:
    # PyTorch .bin weights only where the repository has no safetensors (SGLang prefers safetensors)
    has_safetensors = any(n.endswith(".safetensors") for n in names)
    return ALLOW if has_safetensors else [*ALLOW, "*.bin"]


def plan_pull(repo_id: str, revision: str | None = None, folder: Path | None = None) -> PullPlan:
    """The files SGLang needs and their sizes (the Hub's listing), before anything is downloaded. A file is
    "here" when the folder has it at its listed size."""
    from huggingface_hub import HfApi  # noqa: PLC0415
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415
    from huggingface_hub.utils import filter_repo_objects  # noqa: PLC0415
    folder = folder or models_dir() / (repo_id.replace("/", "--") + (f"@{revision}" if revision else ""))
    if _offline():
        raise _unreachable(repo_id, "HF_HUB_OFFLINE is set: nothing can be downloaded")
    _check_reachable(repo_id)
    api = HfApi()
    try:
        commit = str(api.model_info(repo_id, revision=revision).sha)
        listing = [f for f in api.list_repo_tree(repo_id, revision=commit, recursive=True) if isinstance(f, RepoFile)]
    except Exception as err:  # noqa: BLE001
        raise _hub_error(repo_id, revision, err) from None
    sizes = {f.path: int(f.size) for f in listing}
    keep = filter_repo_objects(sorted(sizes), allow_patterns=_patterns(list(sizes)))
    files = tuple((name, sizes[name], _have(folder / name, sizes[name])) for name in keep)
    if not any(name == "config.json" for name, _, _ in files):
        raise VramkitError(f"{repo_id} has no config.json: not a transformers checkpoint SGLang loads",
                           "give the id of its safetensors repository", Exit.UNSUPPORTED_MODEL)
    return PullPlan(repo_id, revision, commit, folder, files)


def _have(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


PARTIAL = ".vramkit-partial"      # inside the model folder: the bytes of files not yet complete


def pull(plan: PullPlan) -> Path:
    """Download what `plan` lists that is not here yet, each file into PARTIAL first and resumed from its size
    with an HTTP range (a pull that broke off or was interrupted continues where it stopped; the pinned
    huggingface_hub deletes its partial files on failure, so the transfer is ours), with a progress bar (size,
    rate, time left) on stderr; then record the folder. URLs and the token's headers are huggingface_hub's."""
    import httpx  # noqa: PLC0415
    from huggingface_hub import hf_hub_url  # noqa: PLC0415
    from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415
    from rich.progress import (  # noqa: PLC0415 - the terminal edge, only while pulling
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    todo = [(name, size) for name, size, here in plan.files if not here]
    partial = plan.folder / PARTIAL
    partial.mkdir(parents=True, exist_ok=True)
    resumed = sum(min(size, (partial / name).stat().st_size) for name, size in todo if (partial / name).is_file())
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    from rich.console import Console  # noqa: PLC0415
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(f"{plan.repo_id}", total=sum(size for _, size in todo), completed=resumed)
        for name, size in todo:
            part = partial / name
            part.parent.mkdir(parents=True, exist_ok=True)
            have = part.stat().st_size if part.is_file() else 0
            if have > size:           # not this file: start it again
                bar.advance(task, -have)
                part.unlink()
                have = 0
            if have < size:
                _fetch(plan, name, size, part, have, lambda n: bar.advance(task, n), hf_hub_url, build_hf_headers,
                       httpx)
            dest = plan.folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            part.replace(dest)
    _record(plan)
    return plan.folder


def _fetch(plan: PullPlan, name: str, size: int, part: Path, have: int, advance, hf_hub_url, build_hf_headers,
           httpx) -> None:
    url = hf_hub_url(plan.repo_id, name, revision=plan.commit)
    headers = build_hf_headers() | ({"Range": f"bytes={have}-"} if have else {})
    try:
        with httpx.stream("GET", url, headers=headers, follow_redirects=True,
                          timeout=httpx.Timeout(30.0, connect=10.0)) as r:
            if r.status_code == 200 and have:     # the server ignored the range: from the start
                advance(-have)
                have = 0
            elif r.status_code not in (200, 206):
                raise VramkitError(f"{plan.repo_id}: the Hub answered {r.status_code} for {name} (have "
                                   f"{bytes2human(have, 'MiB')} of {bytes2human(size, 'MiB')})",
                                   f"run `vramkit pull {plan.repo_id}` again to resume", Exit.MODEL_UNREACHABLE)
            with part.open("ab" if have else "wb") as f:
                for chunk in r.iter_bytes():      # as received: a chunk size would hold bytes back from a break
                    f.write(chunk)
                    advance(len(chunk))
    except httpx.HTTPError as e:
        got = part.stat().st_size if part.is_file() else 0
        raise VramkitError(f"{plan.repo_id}: the download of {name} broke off at {bytes2human(got, 'MiB')} of "
                           f"{bytes2human(size, 'MiB')} ({type(e).__name__})",
                           f"run `vramkit pull {plan.repo_id}` again: it resumes from there",
                           Exit.MODEL_UNREACHABLE) from None
    got = part.stat().st_size
    if got != size:
        raise VramkitError(f"{plan.repo_id}: {name} stopped at {bytes2human(got, 'MiB')} of {bytes2human(size, 'MiB')}",
                           f"run `vramkit pull {plan.repo_id}` again: it resumes from there", Exit.MODEL_UNREACHABLE)


def _record(plan: PullPlan) -> None:
    record = {"repo_id": plan.repo_id, "revision": plan.revision or "main", "commit": plan.commit,
              "path": str(plan.folder.resolve()), "bytes": plan.total_bytes, "files": len(plan.files),
              "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = _record_path(plan.repo_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    tmp.replace(path)
