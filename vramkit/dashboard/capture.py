"""A capture of the live panels (`vramkit dashboard --capture DIR`, on a GPU host without a browser) and
its replay (`--replay DIR`, here): the same JSON the live sources answer, with meta.json saying which
device, driver, versions and date it came from; the page shows that in a banner.
"""
from __future__ import annotations

import errno
import json
import os
import platform
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vramkit import __version__, catalog
from vramkit.catalog import GpuSpec
from vramkit.core.gpu.snapshot import is_na
from vramkit.dashboard import planning
from vramkit.dashboard.sources import LiveSource
from vramkit.errors import Exit, VramkitError
from vramkit.launch.resolve import host_available

CAPTURE_FILES = ("meta.json", "live.json", "server.json", "bench.json", "plan.json", "metrics.txt")
CAPTURE_SCHEMA = "vramkit.dashboard-capture/1"


CAPTURE_FILE_MAX_BYTES = 16 << 20     # a capture's files are KB to a few MB


def _read_capture_file(folder: Path, name: str, raw: bool = False) -> Any:
    """One of CAPTURE_FILES, opened inside `folder` only and never through a link (issue 20 item 4: a
    committed capture whose metrics.txt linked to /etc/shadow served it at /metrics)."""
    if name not in CAPTURE_FILES:
        raise VramkitError(f"{name!r} is not a capture file", "capture again", Exit.BAD_FILE)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise VramkitError(f"capture file {folder / name} is not a regular file", "capture again",
                                   Exit.BAD_FILE)
            data = fh.read(CAPTURE_FILE_MAX_BYTES + 1)
    except OSError as e:
        why = "a symlink, which a replay never follows" if e.errno == errno.ELOOP else e.strerror
        raise VramkitError(f"capture file {folder / name} cannot be read ({why})", "capture again",
                           Exit.BAD_FILE) from None
    if len(data) > CAPTURE_FILE_MAX_BYTES:
        raise VramkitError(f"capture file {folder / name} is over {CAPTURE_FILE_MAX_BYTES >> 20} MiB",
                           "capture again", Exit.BAD_FILE)
    text = data.decode("utf-8", "replace")
    return text if raw or name.endswith(".txt") else json.loads(text)


class ReplaySource(LiveSource):
    """The panels from a capture directory. The plan explorer still plans here (the planner and the
    catalog are local); 'the card NVML sees' is the captured card."""

    mode = "replay"

    def __init__(self, directory: Path):
        super().__init__()
        self.dir = Path(directory)
        try:
            self._meta = json.loads(_read_capture_file(self.dir, "meta.json", raw=True))
        except (VramkitError, ValueError) as e:
            raise VramkitError(f"{self.dir} is not a dashboard capture ({e})",
                               "give the folder `vramkit dashboard --capture DIR` wrote", Exit.BAD_FILE) from None
        if self._meta.get("schema") != CAPTURE_SCHEMA:
            raise VramkitError(f"{self.dir}/meta.json has schema {self._meta.get('schema')!r}, not {CAPTURE_SCHEMA}",
                               "capture again with this vramkit", Exit.BAD_FILE)

    def _read(self, name: str) -> Any:
        return _read_capture_file(self.dir, name)

    def meta(self) -> dict:
        return self._meta | {"mode": self.mode, "replay_dir": str(self.dir)}

    def plan(self, raw: dict[str, str]) -> dict:
        card = self._meta.get("nvml_card")

        def read_gpu(tp: int = 1, link_for=None):
            if not card:
                raise VramkitError("the capture saw no GPU", "pick a catalogued card", Exit.NO_GPU)
            base = catalog.gpu_by_nvml_name(card["nvml_name"]) or catalog.gpu("rtx-4080-16gb")
            spec = GpuSpec(name=card["name"], label=card["nvml_name"], memory_total_bytes=card["memory_total_bytes"],
                           bandwidth_bytes_s=base.bandwidth_bytes_s, pcie_gen=base.pcie_gen,
                           pcie_lanes=base.pcie_lanes, nvml_names=(card["nvml_name"],))
            return spec, int(card["free_bytes"])

        host = self._meta.get("host_ram_available_bytes")
        return planning.plan_view(planning.parse_params(raw), read_gpu, (lambda: host) if host else None)

    def live(self) -> dict:
        return self._read("live.json")

    def server(self) -> dict:
        return self._read("server.json")

    def bench(self) -> dict:
        return self._read("bench.json")

    def metrics_text(self) -> str:
        return self._read("metrics.txt")


def capture(source: LiveSource, directory: Path, samples: int = 10, interval_s: float = 1.0) -> dict:
    """Write every panel's JSON from the live system into `directory` (made if missing): the live
    panel sampled `samples` times `interval_s` apart, the server, the bench results, the default plan
    for the card NVML sees, /metrics, and meta.json (device, driver, versions, date)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VramkitError(f"cannot create {directory} ({e.strerror})", "pick a writable folder",
                           Exit.BAD_FILE) from None
    live = None
    for i in range(max(1, samples)):
        if i:
            time.sleep(interval_s)
        live = source.live()
    snap = source.snapshot()
    server = source.server()
    gpus = [] if snap.unavailable is not None else [g for g in snap.gpus if g.error is None]
    card = None
    if gpus and not is_na(gpus[0].total_bytes):
        g = gpus[0]
        known = catalog.gpu_by_nvml_name(str(g.name))
        card = {"name": known.name if known else f"nvml:{g.name}", "nvml_name": str(g.name),
                "memory_total_bytes": int(g.total_bytes), "free_bytes": int(g.free_bytes)}
    info = server.get("server_info") or {}
    device = ", ".join(str(g.name) for g in gpus) if gpus else f"{platform.node()} (no GPU)"
    # what the numbers stand for when it is not the bare card (e.g. "..., memory emulated at 16 GB")
    device = os.environ.get("VRAMKIT_DEVICE_LABEL") or device
    meta = {
        "schema": CAPTURE_SCHEMA, "captured_at_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": device, "gpu_names": [str(g.name) for g in gpus], "host": platform.node(),
        "driver": None if snap.unavailable is not None or is_na(snap.driver_version) else str(snap.driver_version),
        "versions": {"vramkit": __version__, "python": platform.python_version(),
                     "sglang_server": info.get("version"), "sglang_pinned": catalog.versions().sglang_pip},
        "nvml_card": card, "host_ram_available_bytes": host_available(),
        "live_samples": samples, "live_interval_s": interval_s,
    }
    default_plan = {"preset": "optimized"} | ({"gpu": "auto"} if card else {})
    try:
        plan = source.plan(default_plan)
    except VramkitError as e:
        plan = {"error": e.line(), "request": default_plan}
    files = {"meta.json": meta, "live.json": live, "server.json": server, "bench.json": source.bench(),
             "plan.json": plan}
    for name, data in files.items():
        (directory / name).write_text(json.dumps(data, indent=1, default=str) + "\n")
    try:
        from prometheus_client import generate_latest  # noqa: PLC0415 - optional where it is captured
        metrics = generate_latest(source.metrics_registry()).decode()
    except ImportError:                 # the GPU host's Python may lack it: every other panel still counts
        metrics = "# prometheus-client was not installed where this was captured\n"
    (directory / "metrics.txt").write_text(metrics)
    return meta
