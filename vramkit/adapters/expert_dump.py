"""SGLang's expert-distribution dump, read: the routing counts `vramkit kt-placement` places experts by.

SGLang's recorder (--expert-distribution-recorder-mode stat; POST /start_expert_distribution_record, the workload,
POST /dump_expert_distribution_record) writes `expert_distribution_recorder_<time>.pt` into
$SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR (default /tmp): torch.save of a dict whose `logical_count` is
[steps, layers, experts] (or [layers, experts]). A .json with the same key is read too (the form SGLang's
--init-expert-location also accepts). Steps are summed: one count per layer and expert.

In stat mode the recorder keeps its forward passes in a ring of --expert-distribution-recorder-buffer-size rows,
1000 unless given (server_args.py _handle_expert_distribution_metrics; eplb/expert_distribution.py _CircularBuffer:
rows not yet written are zeros, and the 1001st pass overwrites the first). A dump whose ring is full may therefore
have dropped the workload's earlier passes; `-1` keeps every pass (_InfiniteBuffer).
"""
from __future__ import annotations

import json
from pathlib import Path

from vramkit.errors import Exit, VramkitError

RING_DEFAULT = 1000     # SGLang 0.5.15.post1's recorder buffer in stat mode when none is given
# the recorder as kt-placement wants it: counts per expert, every forward pass kept (README, the command's help)
RECORD_FLAGS = "--expert-distribution-recorder-mode stat --expert-distribution-recorder-buffer-size -1"


def ring_full(steps_written: int, steps: int) -> bool:
    """Whether a dump is SGLang's default ring with every row written: earlier passes may have been overwritten."""
    return steps == RING_DEFAULT and steps_written == steps


def _sum_to_layers(value: object, where: str) -> tuple[list[list[float]], int, int]:
    """(counts summed over steps, steps in the dump, steps with any count); a 2-D table counts as one step."""
    import torch  # noqa: PLC0415 - torch takes seconds to import; only this command reads a dump
    t = value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64)
    if t.dim() not in (2, 3):
        raise VramkitError(f"{where}: logical_count has {t.dim()} dimensions, not [steps,] layers x experts",
                           "use the recorder's dump as written", Exit.BAD_FILE)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    written = int((t.flatten(1) != 0).any(dim=1).sum())
    return t.sum(dim=0).to(torch.float64).tolist(), t.shape[0], written


def read_counts(path: str) -> tuple[list[list[float]], int, int]:
    """logical_count from a recorder dump (.pt) or a JSON holding it, summed over steps; with the dump's steps and
    how many of them hold counts (`ring_full`)."""
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
        raise VramkitError(f"{where}: no logical_count in it", f"record with --extra-args \"{RECORD_FLAGS}\"",
                           Exit.BAD_FILE)
    try:
        return _sum_to_layers(data["logical_count"], where)
    except (TypeError, ValueError) as e:
        raise VramkitError(f"{where}: logical_count is not a table of numbers ({e})",
                           "use the recorder's dump as written", Exit.BAD_FILE) from None
