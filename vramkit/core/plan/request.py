"""What the user asked for, before anything is resolved: one frozen, typed `PlanRequest`.

The CLI (commands/plan.py), the dashboard's plan explorer (dashboard/planning.py), the README generator
(generated.py), the committed compose files and the flag-test cases (launch/) each build one; the resolver
(launch/resolve.py) turns it into a plan. Nothing below commands/ sees the command line's own types.

`request_from_text()` checks text values (a command-line flag, a dashboard field) against their
declarations: the target fields below and the knobs (core/plan/knobs.py), one line and exit 64 for a bad one.
Pure: values in, a PlanRequest or a VramkitError out.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vramkit.core.plan.knobs import Knobs, specs
from vramkit.core.plan.kt_hybrid import parse_cpu_isa, parse_read_gbs
from vramkit.errors import Exit, VramkitError

PCIE_GENS = (3, 4, 5, 6)
PCIE_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class PlanRequest:
    """A plan as asked for: names (not yet looked up), target figures in the units the user gives them,
    and the knobs given (each already checked against its declaration; the preset's fill the rest)."""
    preset: str | None = None
    model: str | None = None                 # a catalogued name, a folder with config.json, or a Hub id (owner/name)
    revision: str | None = None              # the Hub id's branch, tag or commit (None: main)
    gpu: str | None = None                   # a catalogued GPU, or "auto" (read through NVML)
    gpu_free_gib: float | None = None        # free when SGLang starts loading weights
    other_used_gib: float | None = None      # held by other processes on the card
    host_ram_gib: float | None = None        # available host RAM (None: read it)
    host_cores: int | None = None            # physical cores of the target host's server cpuset (None: this host's)
    gpu_bandwidth_gbs: float | None = None   # the card's memory bandwidth, GB/s (a card the catalog lacks)
    gpu_pcie: tuple[int, int] | None = None  # (gen, lanes) of the card's host link
    host_read_gbs: tuple[tuple[int, float], ...] | None = None   # host read GB/s per thread count (hybrid MoE mode)
    cpu_isa: str | None = None               # the CPU planned for: avx2 | avx512 | amx (None: this host's)
    kt_weight_path: str | None = None        # the CPU experts' folder (the hybrid MoE mode)
    kt_placement: str | None = None          # which experts sit on the GPU (`vramkit kt-placement`'s file)
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))   # read-only, like the rest


def _amount(flag: str, unit: str, *, positive: bool, upper: float = math.inf) -> Callable[[Any], float]:
    """A figure in the user's unit: a finite number, > 0 (or >= 0), below `upper`."""
    sign = "> 0" if positive else ">= 0"
    bound = f"in {unit}, {sign}"

    def parse(raw: Any) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise VramkitError(f"{flag} {raw!r} is not a number", f"give {flag} {bound}", Exit.BAD_INPUT) from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0) or value >= upper:
            raise VramkitError(f"{flag} {raw!r} is not a finite number {sign}" + (
                f" and < {upper:g}" if upper < math.inf else ""), f"give {flag} {bound}", Exit.BAD_INPUT)
        return value
    return parse


def _whole(flag: str, unit: str, *, upper: int) -> Callable[[Any], int]:
    """A whole number of `unit`, 1 to `upper`."""
    def parse(raw: Any) -> int:
        text = str(raw).strip()
        if isinstance(raw, bool) or not text.isdigit() or not 1 <= int(text) <= upper:
            raise VramkitError(f"{flag} {raw!r} is not a whole number in 1-{upper}", f"give {flag} N, in {unit}",
                               Exit.BAD_INPUT)
        return int(text)
    return parse


def _pcie(raw: Any) -> tuple[int, int]:
    gen_s, _, lanes_s = str(raw).lower().partition("x")
    if not (gen_s.isdigit() and lanes_s.isdigit() and int(gen_s) in PCIE_GENS and int(lanes_s) in PCIE_WIDTHS):
        raise VramkitError(f"--gpu-pcie {raw!r} is not a PCIe link", "give GENxLANES, e.g. --gpu-pcie 4x16 "
                           f"(gen {'/'.join(map(str, PCIE_GENS))}, x{'/x'.join(map(str, PCIE_WIDTHS))})",
                           Exit.BAD_INPUT)
    return int(gen_s), int(lanes_s)


def _text(raw: Any) -> str:
    return str(raw)


# The request's fields besides the knobs: field name -> (CLI flag, parser of a text value). The knobs'
# flags come from their declarations (core/plan/knobs.py).
TARGET_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "preset": ("--preset", _text),
    "model": ("--model", _text),
    "revision": ("--revision", _text),
    "gpu": ("--gpu", _text),
    "gpu_free_gib": ("--gpu-free-gib", _amount("--gpu-free-gib", "GiB", positive=True)),
    "other_used_gib": ("--other-used-gib", _amount("--other-used-gib", "GiB", positive=False)),
    "host_ram_gib": ("--host-ram-gib", _amount("--host-ram-gib", "GiB", positive=True)),
    "host_cores": ("--host-cores", _whole("--host-cores", "physical cores", upper=4096)),
    "gpu_bandwidth_gbs": ("--gpu-bandwidth-gbs", _amount("--gpu-bandwidth-gbs", "GB/s", positive=True)),
    "gpu_pcie": ("--gpu-pcie", _pcie),
    "host_read_gbs": ("--host-read-gbs", lambda raw: raw if isinstance(raw, tuple)
                      else parse_read_gbs(raw, "--host-read-gbs")),
    "cpu_isa": ("--cpu-isa", parse_cpu_isa),
    "kt_weight_path": ("--kt-weight-path", _text),
    "kt_placement": ("--kt-placement", _text),
}


def flags(knobs_cls: type = Knobs) -> dict[str, str]:
    """Every request field -> its CLI flag (the target fields, then the knobs)."""
    return {name: flag for name, (flag, _) in TARGET_FIELDS.items()} | {s.name: s.cli_flag for s in specs(knobs_cls)}


def request_from_text(values: Mapping[str, Any], knobs_cls: type = Knobs) -> PlanRequest:
    """A request from field name -> value (text from a command line or a form, or an already typed value);
    None and "" are "not given". An unknown field or a bad value is one line and exit 64."""
    target: dict[str, Any] = {}
    knobs: dict[str, Any] = {}
    by_name = {s.name: s for s in specs(knobs_cls)}
    for name, raw in values.items():
        if raw is None or raw == "":
            continue
        if name in TARGET_FIELDS:
            target[name] = TARGET_FIELDS[name][1](raw)
        elif name in by_name:
            spec = by_name[name]
            try:
                knobs[name] = spec.parse(raw, from_text=isinstance(raw, str))
            except ValueError as e:
                raise VramkitError(f"{spec.cli_flag} {raw!r} {e}", f"give {spec.cli_flag} {spec.range_text()}"
                                   + (f", in {spec.unit}" if spec.unit else ""), Exit.BAD_INPUT) from None
        else:
            raise VramkitError(f"unknown plan field {name!r}", f"use one of: {', '.join(flags(knobs_cls))}",
                               Exit.BAD_INPUT)
    return PlanRequest(**target, knobs=knobs)
