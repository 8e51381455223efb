"""One error type and one table of exit codes for every vramkit command.

A command that fails raises `VramkitError`; `vramkit.cli.main` prints its one line
(`vramkit: <what happened> -> <what to do>`) to stderr and exits with its code. No traceback
reaches the user. Codes are distinct so scripts can branch on them.
"""
from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    OVER_THRESHOLD = 1      # vram-safe: memory in use above the threshold
    CANNOT_TELL = 2         # vram-safe / monitor: no NVML, no driver, no GPU
    GPU_LOST = 3            # monitor: a GPU went away mid-run
    NO_FIT = 10             # the plan does not fit the GPU / host
    NO_GPU = 11             # launcher: no GPU visible
    NO_DOCKER = 12          # launcher: docker or its GPU runtime missing
    PORT_BUSY = 13
    HOST_MEMORY = 14        # host RAM or memlock too small for the pinned host pool
    START_FAILED = 15       # the server process/container exited during start-up
    HEALTH_TIMEOUT = 16
    BAD_FLAG = 17           # SGLang's own parser refused an argument
    NOT_RUNNING = 18
    SERVICE_DOWN = 19       # a server we talk to (SGLang, Redis, embed service) is unreachable
    STOP_FAILED = 20        # down: the server could not be stopped (its record is kept)
    UNSUPPORTED_MODEL = 21  # plan: an architecture, config field or quantization method the planner does not model
    HOST_CPU = 22           # the host CPU lacks the instructions a KT method needs (AMX, AVX-512-BF16, AVX2)
    BAD_INPUT = 64          # EX_USAGE: unknown model/gpu/preset, bad flag value
    BAD_FILE = 65           # EX_DATAERR: unreadable or invalid file
    INTERRUPTED = 130
    # vram-safe speaks the monitoring-plugin convention (Nagios/Icinga/Prometheus blackbox checks), so
    # a script branches on it without knowing vramkit: these alias 0-3 above on purpose.
    VRAM_OK = 0             # every chosen GPU under its warn line
    VRAM_WARNING = 1        # over the warn line (within WARN_HEADROOM of the threshold), not over it
    VRAM_CRITICAL = 2       # over the threshold (the running preset's budget, or --threshold)
    VRAM_UNKNOWN = 3        # cannot tell: no NVML, no driver, no GPU, a GPU unreadable or lost
    NO_SGLANG = 23          # RUNTIME=native: its Python cannot import SGLang (make setup-gpu)
    NO_GPU_TORCH = 24       # make setup-gpu: the driver is too old for the pinned CUDA, or torch cannot see the GPU
    NO_PYTHON = 25          # a make step's preconditions: no interpreter, or one older than the kit's floor
    MODEL_UNREACHABLE = 26  # --model ORG/NAME / pull: not in the Hugging Face cache and the Hub is not reachable
                            # (HF_HUB_OFFLINE, no network, a gated or private repository)
    ENCODER_DOWN = 27       # embed serve: the encoder worker was not replaced within its bound (supervisor restarts)


# What each code means, in the words the README's table and `vramkit --help` print (both generated from this;
# tests/unit/test_input_holes.py holds every code to both). vram-safe's 0-3 aliases are described with it.
MEANING: dict[str, str] = {
    "OK": "done; `vramkit plan`: it fits",
    "OVER_THRESHOLD": "vram-safe: WARNING, over its warn line",
    "CANNOT_TELL": "vram-safe: CRITICAL, over the budget; monitor: no NVML, driver or GPU",
    "GPU_LOST": "vram-safe: UNKNOWN, cannot tell; monitor: a GPU went away",
    "NO_FIT": "the plan does not fit the GPU or the host (auto-fit found nothing that fits, or --no-auto-fit)",
    "NO_GPU": "no GPU visible (NVML), or a GPU index that is not there",
    "NO_DOCKER": "Docker, or its NVIDIA runtime, is missing",
    "PORT_BUSY": "the port is in use",
    "HOST_MEMORY": "host RAM (or disk) too small for what the step needs",
    "START_FAILED": "the server exited during start-up",
    "HEALTH_TIMEOUT": "the server did not answer /health in time",
    "BAD_FLAG": "SGLang's own parser refused an argument",
    "NOT_RUNNING": "nothing by that name runs (vramkit host --pin)",
    "SERVICE_DOWN": "a server the kit talks to (SGLang, Redis, the embed service) is unreachable",
    "STOP_FAILED": "the server could not be stopped (its record is kept)",
    "UNSUPPORTED_MODEL": "a model the planner does not model (named in the line)",
    "HOST_CPU": "the CPU lacks the instructions a step needs (a KT method's, the preset moe)",
    "NO_SGLANG": "RUNTIME=native's Python cannot import SGLang (make setup-gpu)",
    "NO_GPU_TORCH": "make setup-gpu: the driver is too old, or torch cannot see the GPU",
    "NO_PYTHON": "the interpreter a set-up step needs is missing or too old (Python >= 3.11)",
    "MODEL_UNREACHABLE": "a Hugging Face model id neither in the cache nor reachable (HF_HUB_OFFLINE, no network, "
                         "gated or private)",
    "ENCODER_DOWN": "embed serve: its encoder worker could not be replaced within the bound; the supervisor "
                    "restarts the service",
    "BAD_INPUT": "bad input: an unknown name, a bad flag or value (typos included)",
    "BAD_FILE": "an unreadable or invalid file",
    "INTERRUPTED": "interrupted (Ctrl-C)",
}


def exit_code_lines() -> list[str]:
    """'CODE  meaning' for every distinct exit code, in order."""
    seen: dict[int, str] = {}
    for name, member in Exit.__members__.items():
        if name == member.name and int(member) not in seen:
            seen[int(member)] = MEANING[name]
    return [f"{code:>3}  {text}" for code, text in sorted(seen.items())]


class VramkitError(Exception):
    """A failure with one line for the user and the exit code that names it."""

    def __init__(self, what: str, todo: str = "", code: Exit = Exit.BAD_INPUT):
        super().__init__(what)
        self.what = what
        self.todo = todo
        self.code = code

    def line(self) -> str:
        return f"vramkit: {self.what}" + (f" -> {self.todo}" if self.todo else "")
