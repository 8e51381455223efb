"""Proof against SGLang itself: run launch argument lists through SGLang 0.5.15.post1's own code, on a CPU.

SGLang lives in its own environment, `.venv-sglang` (made by `make setup-sglang-check`: CPU torch, SGLang
with --no-deps, the few packages its imports need, a torchvision stand-in). vramkit never imports SGLang;
`check_launches` sends its batch to ONE `.venv-sglang/bin/python` running `_sglang_check_worker.py --serve`,
started on first use and kept for the life of the process (`Checker`: the ~11 s import is paid once per process,
once per test run, however many batches follow; closed at exit). The worker parses each argv with
`ServerArgs.add_cli_args`, builds `ServerArgs(device="cpu")` and `ModelConfig.from_server_args` on the model's
local config.json, offline.

Values SGLang resolves on device "cpu" are not all what a GPU run picks (see `CPU_RESOLVED_CAVEATS`):
compare only the ones a CPU run can know.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vramkit.errors import Exit, VramkitError
from vramkit.units import MiB

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_sglang_check_worker.py")
SETUP_HINT = "run make setup-sglang-check"

# Resolved on device "cpu" these are NOT what `python -m sglang.launch_server` on a CUDA GPU picks:
CPU_RESOLVED_CAVEATS = {
    "cuda_graph_decode_max_bs": "cpu branch uses torch_compile_max_bs (default 32); a GPU under 20 GiB picks 8, "
                                "20-35 GiB 24 (tp<4), and an explicit --cuda-graph-max-bs-decode is kept there",
    "mem_fraction_static": "when not given, computed from host RAM (or gpu_mem_bytes) with the cpu decode max_bs; "
                           "a GPU run reserves (max_bs_gpu - 32) * 2 MiB less or more",
    "chunked_prefill_size": "when not given, tiered by host RAM unless the case carries gpu_mem_bytes",
    "attention_backend": "cpu: intel_amx or torch_native; a GPU picks flashinfer/fa3/triton",
    "sampling_backend": "cpu forces pytorch",
    "model_quantization": "ModelConfig keeps 'gptq'/'awq'; on a CUDA GPU SGLang may switch to the marlin kernels",
}


@dataclasses.dataclass(frozen=True)
class LaunchCase:
    """One launch to check: SGLang args only (no `python -m sglang.launch_server`)."""

    case_id: str
    argv: Sequence[str]
    model_config_dir: Path | None  # folder with config.json; None = parser only
    gpu_mem_bytes: int | None = None  # target GPU's total memory: SGLang's defaults follow its tier


@dataclasses.dataclass(frozen=True)
class CheckResult:
    case_id: str
    ok: bool
    error: str  # SGLang's own line ("unrecognized arguments: --kv-offload", "ValueError: ..."), "" when ok
    stage: str  # where it stopped: parse | server_args | model_config | done
    resolved: dict[str, Any]  # ServerArgs/ModelConfig values after resolution on cpu (see CPU_RESOLVED_CAVEATS)
    deprecations: list[str]
    warnings: list[str]
    model_path_given: str | None
    check_s: float

    @property
    def context_len(self) -> int | None:
        return self.resolved.get("context_len")


@dataclasses.dataclass(frozen=True)
class ParseCase:
    """A model's output to run through the pinned SGLang's own parser (issue 21): kind "tool" (a
    --tool-call-parser name, with the request's OpenAI `tools`) or "reasoning" (a --reasoning-parser name)."""

    parse_id: str
    kind: str
    parser: str
    text: str
    tools: Sequence[dict[str, Any]] = ()
    chunk_chars: int = 7      # the streamed pass feeds the text in pieces this long (the `stream: true` path)


@dataclasses.dataclass(frozen=True)
class ParseResult:
    parse_id: str
    ok: bool
    error: str                         # SGLang's line ("ValueError: Unsupported tool_call_parser: x"), "" when ok
    normal_text: str
    calls: list[dict[str, Any]]        # [{"name", "arguments" (JSON text)}], as SGLang's ToolCallItems
    reasoning_text: str
    stream: dict[str, Any]             # the same fields, assembled from the streamed pieces


@dataclasses.dataclass(frozen=True)
class CheckBatch:
    results: list[CheckResult]
    sglang_version: str
    import_s: float
    wall_s: float
    parses: list[ParseResult] = dataclasses.field(default_factory=list)


def checker_python() -> Path:
    """The interpreter of the checking environment (VRAMKIT_SGLANG_PYTHON overrides)."""
    override = os.environ.get("VRAMKIT_SGLANG_PYTHON")
    return Path(override) if override else REPO_ROOT / ".venv-sglang" / "bin" / "python"


def require_checker() -> Path:
    py = checker_python()
    if not py.exists():
        raise VramkitError(f"the SGLang checking environment is missing ({py})", SETUP_HINT, Exit.CANNOT_TELL)
    return py


def _as_case(case: Any) -> dict[str, Any]:
    if isinstance(case, (tuple, list)):
        case = LaunchCase(*case)
    config_dir = getattr(case, "model_config_dir", None)
    gpu_mem_bytes = getattr(case, "gpu_mem_bytes", None)
    return {
        "case_id": str(case.case_id),
        "argv": [str(a) for a in case.argv],
        "model_config_dir": None if config_dir is None else str(Path(config_dir).resolve()),
        "gpu_mem_mib": None if gpu_mem_bytes is None else gpu_mem_bytes / MiB,
    }


class Checker:
    """One `_sglang_check_worker.py --serve` process: SGLang imported once, then any number of batches, one JSON
    line each way. Everything the worker logs goes to a temporary file (its last line names a crash)."""

    def __init__(self, python: Path) -> None:
        self.python = python
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}  # deterministic: no SGLang knobs
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   TRITON_INTERPRET="1")   # SGLang's triton kernels, where a request runs one, on the CPU
                                           # (the GPU prompt path's numbers); no other request launches one
        self.env = env
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([str(python), "-I", str(WORKER), "--serve"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(REPO_ROOT))
        self._buffer = b""
        self._lock = threading.Lock()
        self.import_s: float | None = None

    def _crashed(self) -> VramkitError:
        self._log.seek(0)
        lines = [ln for ln in self._log.read().decode(errors="replace").splitlines() if ln.strip()]
        code = self._proc.poll()
        self.close()
        return VramkitError(f"the SGLang checker crashed (exit {code}): {(lines[-1:] or ['no output'])[0][:300]}",
                            SETUP_HINT + " (it rebuilds .venv-sglang when it is incomplete)", Exit.CANNOT_TELL)

    def _read_line(self, deadline: float, what: str) -> dict[str, Any]:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise VramkitError(f"the SGLang check of {what} ran past its time",
                                       "run it again; if it repeats, " + SETUP_HINT, Exit.CANNOT_TELL)
                if not sel.select(min(left, 1.0)):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self._proc.wait(10)
                    raise self._crashed()
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            self.close()
            raise VramkitError("the SGLang checker answered something that is not JSON",
                               SETUP_HINT, Exit.CANNOT_TELL) from None
        return answer

    def run(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """One request (`{"cases": [...], "parses": [...]}`), its answer; `timeout_s` includes the import when
        this is the worker's first request."""
        with self._lock:
            deadline = time.monotonic() + timeout_s
            what = ", ".join(f"{len(request[k])} {name}" for k, name in
                             (("cases", "launches"), ("parses", "parses"), ("gguf_files", "GGUF configs"))
                             if request.get(k)) or "nothing"
            if self.import_s is None:
                self.import_s = float(self._read_line(deadline, what).get("import_s", 0.0))
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(request).encode() + b"\n")
                self._proc.stdin.flush()
            except OSError:
                self._proc.wait(10)
                raise self._crashed() from None
            return self._read_line(deadline, what)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(10)
        self._log.close()
        with _CHECKERS_LOCK:
            if _CHECKERS.get(str(self.python)) is self:
                del _CHECKERS[str(self.python)]


_CHECKERS: dict[str, Checker] = {}
_CHECKERS_LOCK = threading.Lock()


def shared_checker() -> Checker:
    """The process's checker for the current checking interpreter, started on first use, closed at exit."""
    py = require_checker()
    with _CHECKERS_LOCK:
        checker = _CHECKERS.get(str(py))
        if checker is None or not checker.alive:
            checker = _CHECKERS[str(py)] = Checker(py)
    return checker


@atexit.register
def close_checkers() -> None:
    for checker in list(_CHECKERS.values()):
        checker.close()


def run_batch(cases: Iterable[Any], timeout_s: float = 600.0, parses: Iterable[ParseCase] = ()) -> CheckBatch:
    """Check every case, and run every parse, in the process's one checker (`shared_checker`: one SGLang import
    however many batches). Cases: LaunchCase, (case_id, argv, model_config_dir[, gpu_mem_bytes]) tuples, or any
    object with those attributes (the renderer's launch cases)."""
    payload = [_as_case(c) for c in cases]
    parse_payload = [dataclasses.asdict(p) | {"tools": list(p.tools)} for p in parses]
    checker = shared_checker()
    t0 = time.monotonic()
    answer = checker.run({"cases": payload, "parses": parse_payload}, timeout_s)
    wall_s = time.monotonic() - t0
    fields = {f.name for f in dataclasses.fields(CheckResult)}
    results = [CheckResult(**{k: v for k, v in r.items() if k in fields}) for r in answer["results"]]
    parsed = [ParseResult(**{k: r[k] for k in (f.name for f in dataclasses.fields(ParseResult))})
              for r in answer.get("parses", [])]
    return CheckBatch(results, answer.get("sglang_version", "?"), answer.get("import_s", 0.0), wall_s, parsed)


def gguf_configs(files: Iterable[Path], timeout_s: float = 300.0) -> dict[str, Any]:
    """The config the transformers pinned beside SGLang gives SGLang for each GGUF file (in the shared checker:
    transformers is already imported there). `{"transformers_version", "architectures", "configs"}`."""
    answer = shared_checker().run({"gguf_files": [str(f) for f in files]}, timeout_s)
    return answer["gguf"]


def dummy_weights(adapter: Path, names: Sequence[str], shape: tuple[int, int], timeout_s: float = 120.0) -> dict:
    """The pinned SGLang's `--load-format dummy` fill of one parameter per name, as pinned and with the kit's adapter
    seeding by name (in the shared checker; the worker's fourth request says what comes back)."""
    answer = shared_checker().run({"dummy_weights": {"names": list(names), "shape": list(shape),
                                                     "adapter": str(adapter)}}, timeout_s)
    return answer["dummy"]


def gpu_prefill_call(adapter: Path, timeout_s: float = 120.0, fmt: str = "gptq") -> dict:
    """One forward through the kit's GPU prompt path (`fmt`: its GPTQ-Int4 or block-FP8 experts) against the pinned
    SGLang's own classes, the kernel's entry recorded instead of run (in the shared checker; the worker's fifth
    request says what comes back)."""
    return shared_checker().run({"gpu_prefill": {"adapter": str(adapter), "format": fmt}}, timeout_s)["gpu_prefill"]


def gpu_prefill_numbers(adapter: Path, timeout_s: float = 300.0) -> dict:
    """The block-FP8 prompt path's output through SGLang's own triton MoE kernels, interpreted on the CPU, as w8a8 and
    as int8, each against float32 (the worker's sixth request)."""
    return shared_checker().run({"gpu_prefill_numbers": {"adapter": str(adapter)}}, timeout_s)["gpu_prefill"]


def check_launches(cases: Iterable[Any], timeout_s: float = 600.0) -> list[CheckResult]:
    """One result per case, in order. Refusals are results (ok=False, SGLang's line in .error), not exceptions."""
    return run_batch(cases, timeout_s).results


def parser_accepts(argv: Sequence[str]) -> tuple[bool, str]:
    """Does SGLang's parser accept these args? (ok, SGLang's message or ""). Parser only: no model needed."""
    (result,) = check_launches([LaunchCase("parser_accepts", list(argv), None)])
    return result.ok, result.error


_FLAG_IN_MESSAGE = re.compile(r"(?:unrecognized arguments: |argument )(--?[\w-]+(?:/--?[\w-]+)*)")


def bad_flag_error(result: CheckResult, where: str = "the preset") -> VramkitError:
    """The user-facing error for a launch SGLang refused (Exit.BAD_FLAG)."""
    if result.stage == "parse":
        m = _FLAG_IN_MESSAGE.search(result.error)
        flag = m.group(1) if m else "an argument"
        what = f"SGLang's parser refused {flag}: {result.error}"
    else:
        what = f"SGLang refused launch {result.case_id}: {result.error}"
    todo = (f"fix {where} in config/ (SGLang 0.5.15.post1 has no such flag or value); "
            "see `.venv-sglang/bin/python -m sglang.launch_server --help`")
    return VramkitError(what, todo, Exit.BAD_FLAG)


def _main(argv: Sequence[str]) -> int:
    """`python -m vramkit.adapters.sglang_check -- ARGS...`: parser-only check, for a quick look."""
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        ok, message = parser_accepts(args)
    except VramkitError as err:
        print(err.line(), file=sys.stderr)
        return int(err.code)
    print("accepted" if ok else f"refused: {message}")
    return 0 if ok else int(Exit.BAD_FLAG)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
