"""The settings of a launch (`vramkit up`, `make start-qwen-*`), declared once like the planner's knobs: name,
type, default, CLI flag, environment variable, make variable and help. `vramkit up`'s options, the
environment it reads (launch/env.py), the make variables mk/qwen.mk passes (checked by
tests/unit/test_launch_settings.py) and the hints that name a setting all come from this table.

Precedence: the CLI flag, then VRAMKIT_<ENV>, then the default (the port's is config/sglang.toml's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "VRAMKIT_"
RUNTIMES = ("docker", "native")


@dataclass(frozen=True)
class LaunchSetting:
    name: str                     # the LaunchSpec field (launch/steps.py)
    type: type                    # str | int | float | bool
    default: Any                  # None: unset (the field's own default applies)
    cli_flag: str
    env: str                      # VRAMKIT_<env>
    make_var: str | None          # the make variable mk/qwen.mk passes as VRAMKIT_<env> (None: CLI/env only)
    help: str
    old_env: str | None = None    # the name before issue 11, still read with a warning
    choices: tuple[str, ...] = ()
    maximum: float = math.inf     # a number's upper bound (a port: 65535)

    @property
    def env_name(self) -> str:
        return ENV_PREFIX + self.env

    def hint(self, value: str = "N") -> str:
        """How to set it, in every spelling the kit reads: '--timeout N (make TIMEOUT=N, env VRAMKIT_TIMEOUT)'."""
        make = f"make {self.make_var}={value}, " if self.make_var else ""
        return f"{self.cli_flag} {value} ({make}env {self.env_name})"


SETTINGS: tuple[LaunchSetting, ...] = (
    LaunchSetting("runtime", str, "docker", "--runtime", "RUNTIME", "RUNTIME",
                  "docker, or native (python -m sglang.launch_server in the background)", "RUNTIME", RUNTIMES),
    LaunchSetting("port", int, None, "--port", "PORT", "PORT",
                  "host port of SGLang's API, 1-65535 (default: config/sglang.toml's)", "PORT", maximum=65535),
    LaunchSetting("model_path", str, None, "--model-path", "MODEL_PATH", "MODEL_PATH",
                  "local folder or HF id instead of the model's hf_id; it is what gets planned", "MODEL_PATH"),
    LaunchSetting("load_format", str, None, "--load-format", "LOAD_FORMAT", "LOAD_FORMAT",
                  "'dummy': real shapes, random weights, no download, no tokenizer (unless the folder holds one)",
                  "LOAD_FORMAT"),
    LaunchSetting("timeout_s", float, 1200.0, "--timeout", "TIMEOUT", "TIMEOUT",
                  "seconds to wait for /health (a first GPTQ start compiles kernels for ~6 min)", "TIMEOUT"),
    LaunchSetting("gpu_ids", str, None, "--gpus", "GPUS", None, "GPU indices (NVML's), e.g. 0,1", "GPUS"),
    LaunchSetting("dry_run", bool, False, "--dry-run", "DRY_RUN", "DRY_RUN",
                  "plan and check, start nothing (1/true/yes)", "DRY_RUN"),
    LaunchSetting("extra_args", str, None, "--extra-args", "SGLANG_EXTRA_ARGS", None, "more SGLang flags",
                  "SGLANG_EXTRA_ARGS"),
    LaunchSetting("sglang_python", str, None, "--sglang-python", "SERVER_PYTHON", "SERVER_PYTHON",
                  "the Python that runs SGLang, native runtime (default .venv-gpu/bin/python from make "
                  "setup-gpu); checked to hold SGLang and torch before anything starts", "SGLANG_PYTHON"),
)

BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> LaunchSetting:
    return BY_NAME[name]
