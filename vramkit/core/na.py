"""The one "not available" type: a value that could not be read, with why (NVML, Redis, a host probe).

Falsy, prints as N/A, JSON null; arithmetic on it raises, so it cannot pass for a number by accident
(nvitop's `NaType`, gpustat's `safenvml`). Unlike those, it carries its reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # typing_extensions is mypy's (the kit runs on a plain checkout without it)
    from typing_extensions import TypeIs

# NVML error codes that the rest of the kit branches on (pynvml's NVML_ERROR_* values).
NVML_GPU_IS_LOST = 15


@dataclass(frozen=True)
class NotAvailable:
    """A value that could not be read, with why. Falsy; prints as N/A; JSON null."""

    reason: str = "not available"
    code: int | None = None          # the NVML error code when NVML said no

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return "N/A"

    @property
    def gpu_lost(self) -> bool:
        return self.code == NVML_GPU_IS_LOST


NA = NotAvailable()


def is_na(value: Any) -> TypeIs[NotAvailable]:
    return isinstance(value, NotAvailable)
