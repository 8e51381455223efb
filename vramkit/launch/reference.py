"""The machine the committed files are rendered for, declared once: the first user's desktop.

docker-compose.qwen*.yml (launch/compose_files.py), the README's generated tables (generated.py) and the plan
explorer's default card read it; `vramkit plan` plans for this card when none is named. `vramkit up` and
`make start-*` re-plan for the real machine (NVML, psutil, `vramkit host --bandwidth`).
"""
from __future__ import annotations

from vramkit.core.plan.request import PlanRequest

GPU = "rtx-5060-ti-16gb"      # the first user's card (config/gpus.toml)
# the preset a request without --preset and --model plans: bare `vramkit plan` is `make plan` (mk/core.mk's
# PRESET default, held to this by tests/unit/test_input_holes.py), `vramkit up` and `install-service` the same
PRESET = "optimized"
HOST_RAM_GIB = 64.0           # a 64 GiB desktop: room for the presets' pinned host-RAM pools
HOST_PHYSICAL_CORES = 8       # an 8-core desktop CPU (the hybrid MoE mode's CPU expert threads)
# Host memory read bandwidth in GB/s: dual-channel DDR5-5600 reads ~70 % of its 89.6 GB/s peak (assumed, not
# measured; `vramkit host --bandwidth` measures the real one). The hybrid MoE mode's decode estimate uses it.
HOST_READ_GBS = 60.0
# Its CPU for the hybrid MoE mode's plan: an 8-core Zen 4 desktop, AVX-512 with BF16 (kt-kernel's avx512 build;
# `--cpu-isa avx2` plans for a desktop without AVX-512). `vramkit up` checks the real CPU.
HOST_CPU_ISA = "avx512"
HOST_CPU_LABEL = "the reference desktop (Zen 4, 8 cores)"


def request(preset: str | None = None, **fields: object) -> PlanRequest:
    """A request for the reference machine (the card, its host RAM and read bandwidth), `fields` on top."""
    base: dict[str, object] = {"preset": preset, "gpu": GPU, "host_ram_gib": HOST_RAM_GIB,
                               "host_read_gbs": ((1, HOST_READ_GBS),), "cpu_isa": HOST_CPU_ISA}
    return PlanRequest(**(base | fields))  # type: ignore[arg-type]
