"""SGLang's expert-distribution dump, read: the routing counts `vramkit kt-placement` places experts by.

SGLang's recorder (--expert-distribution-recorder-mode stat; POST /start_expert_distribution_record, the workload,
POST /dump_expert_distribution_record) writes `expert_distribution_recorder_<time>.pt` into
$SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR (default /tmp): torch.save of a dict whose `logical_count` is
[steps, layers, experts] (or [layers, experts]). A .json with the same key is read too (the form SGLang's
--init-expert-location also accepts). Steps are summed: one count per layer and expert.
"""
from __future__ import annotations

import json
from pathlib import Path

from vramkit.errors import Exit, VramkitError


def _sum_to_layers(value: object, where: str) -> list[list[float]]:
    import torch  # noqa: PLC0415 - torch takes seconds to import; only this command reads a dump
    t = value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64)
    if t.dim() not in (2, 3):
        raise VramkitError(f"{where}: logical_count has {t.dim()} dimensions, not [steps,] layers x experts",
                           "use the recorder's dump as written", Exit.BAD_FILE)
    if t.dim() == 3:
        t = t.sum(dim=0)
    return t.to(torch.float64).tolist()


def read_counts(path: str) -> list[list[float]]:
    """logical_count from a recorder dump (.pt) or a JSON holding it, summed over steps."""
    p = Path(path)
    if not p.is_file():
        raise VramkitError(f"{path}: no such file", "give the .pt the recorder wrote (see `vramkit kt-placement "
                           "--help`)", Exit.BAD_INPUT)
    where = str(p)
    try:
        if p.suffix == ".json":
            data = json.loads(p.read_text())
        else:
            import torch  # noqa: PLC0415 - as above
            data = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:      # noqa: BLE001 - torch's restricted unpickler raises anything on a file not its own
        raise VramkitError(f"{where}: not a readable expert-distribution dump ({type(e).__name__})",
                           "give the .pt SGLang's /dump_expert_distribution_record wrote", Exit.BAD_FILE) from None
    if not isinstance(data, dict) or "logical_count" not in data:
        raise VramkitError(f"{where}: no logical_count in it", "record with --expert-distribution-recorder-mode stat",
                           Exit.BAD_FILE)
    try:
        return _sum_to_layers(data["logical_count"], where)
    except (TypeError, ValueError) as e:
        raise VramkitError(f"{where}: logical_count is not a table of numbers ({e})",
                           "use the recorder's dump as written", Exit.BAD_FILE) from None
