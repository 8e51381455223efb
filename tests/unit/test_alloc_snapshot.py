"""benchmarks/gpu/alloc_snapshot.py on a snapshot in torch's schema (torch/cuda/_memory_viz.py reads the same keys):
the reserved and allocated totals, the holes empty_cache cannot give back, and the live bytes by SGLang line."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from repo_modules import load_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import alloc_snapshot  # noqa: E402

MiB = 1 << 20
REPACK = [{"filename": "/x/torch/_ops.py", "line": 1, "name": "__call__"},
          {"filename": "/x/site-packages/sglang/srt/hardware_backend/gpu/quantization/gptq_kernels.py", "line": 320,
           "name": "process_weights_after_loading"}]
EMPTY = [{"filename": "/x/site-packages/sglang/srt/layers/quantization/gptq/schemes/gptq_moe.py", "line": 181,
          "name": "create_weights"}]


def snapshot() -> dict:
    block = lambda size, state, frames=(): {"size": size, "requested_size": size, "state": state,  # noqa: E731
                                            "address": 0, "frames": list(frames)}
    return {"segments": [
        # a repacked weight sharing its 100 MiB segment with 20 MiB of free space (a freed g_idx, say)
        {"address": 0, "total_size": 100 * MiB, "segment_type": "large", "device": 0,
         "blocks": [block(80 * MiB, "active_allocated", REPACK), block(20 * MiB, "inactive")]},
        # a fully used segment, and a small one with a sliver of free space under the 1 MiB floor
        {"address": 1, "total_size": 40 * MiB, "segment_type": "large", "device": 0,
         "blocks": [block(40 * MiB, "active_allocated", EMPTY)]},
        {"address": 2, "total_size": 2 * MiB, "segment_type": "small", "device": 0,
         "blocks": [block(MiB + MiB // 2, "active_allocated"), block(MiB // 2, "inactive")]},
    ], "device_traces": [[]]}


def test_totals_holes_and_sites():
    res = alloc_snapshot.analyse(snapshot())
    assert res["reserved_mib"] == 142 and res["allocated_mib"] == 121.5 and res["segments"] == 3
    assert res["free_in_used_segments_mib"] == 20
    assert res["holes"] == [{"segment_mib": 100.0, "free_mib": 20.0, "segment_type": "large",
                             "shared_with": "srt/hardware_backend/gpu/quantization/gptq_kernels.py:320 "
                                            "process_weights_after_loading"}]
    assert list(res["live_by_site_mib"].items()) == [
        ("srt/hardware_backend/gpu/quantization/gptq_kernels.py:320 process_weights_after_loading", 80.0),
        ("srt/layers/quantization/gptq/schemes/gptq_moe.py:181 create_weights", 40.0), ("?", 1.5)]


def test_segment_order_says_whether_newer_segments_lie_higher():
    """The trace's segment events: three created (two of 20 MiB, the second below the first), one given back."""
    ev = lambda action, addr, size: {"action": action, "addr": addr, "size": size}   # noqa: E731
    snap = {"segments": [], "device_traces": [[
        ev("segment_alloc", 0x1000, 20 * MiB), ev("alloc", 0x1000, MiB), ev("segment_alloc", 0x9000, 192 * MiB),
        ev("segment_free", 0x9000, 192 * MiB), ev("segment_alloc", 0x0500, 20 * MiB)]]}
    order = alloc_snapshot.segment_order(snap)
    assert order == {"segment_allocs": 3, "segment_frees": 1, "created_above_the_previous": 1, "pairs": 2,
                     "equal_size_groups": 1, "equal_size_groups_rising": 0}
    assert alloc_snapshot.segment_order(snapshot())["segment_allocs"] == 0     # no trace: nothing claimed


def test_the_command_writes_its_json_and_refuses_an_unreadable_file(tmp_path):
    snap, out = tmp_path / "s.pickle", tmp_path / "r.json"
    snap.write_bytes(pickle.dumps(snapshot()))
    script = ROOT / "benchmarks" / "gpu" / "alloc_snapshot.py"
    ok = subprocess.run([sys.executable, str(script), str(snap), "--out", str(out)], capture_output=True, text=True)
    written = json.loads(out.read_text())
    assert ok.returncode == 0 and written["reserved_mib"] == 142 and written["segment_order"]["pairs"] == 0
    (tmp_path / "bad.pickle").write_bytes(b"not a pickle")
    bad = subprocess.run([sys.executable, str(script), str(tmp_path / "bad.pickle")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("alloc_snapshot: cannot read") and bad.stderr.count("\n") == 1
    assert "Traceback" not in bad.stderr


def test_the_adapter_records_the_weight_load_only_when_asked(monkeypatch, tmp_path, capsys):
    """vramkit_kt_compat: VRAMKIT_CUDA_SNAPSHOT wraps SGLang's ModelRunner.load_model in torch's memory-history recorder
    and dumps its snapshot at the end, also when the load raises; unset, the runner is left alone. torch's CUDA calls
    are the hardware boundary, faked here."""
    import types

    import torch
    compat = load_module("services/sglang-kt/kt_compat/vramkit_kt_compat.py", "vramkit_kt_compat_snap")
    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: calls.append(("record", k)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: calls.append(("dump", path)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class ModelRunner:
        def load_model(self):
            calls.append(("load",))
            raise RuntimeError("out of memory")
    module = types.SimpleNamespace(ModelRunner=ModelRunner)
    monkeypatch.delenv(compat.SNAPSHOT_ENV, raising=False)
    assert compat._patch_for(compat.SGLANG_RUNNER) is None
    monkeypatch.setenv(compat.SNAPSHOT_ENV, str(tmp_path / "load"))
    patcher = compat._patch_for(compat.SGLANG_RUNNER)
    patcher(module)
    patcher(module)                                  # idempotent: wrapped once
    try:
        ModelRunner().load_model()
    except RuntimeError:
        pass
    assert [c[0] for c in calls] == ["record", "load", "dump", "record"]
    assert calls[2][1] == f"{tmp_path / 'load'}.gpu0.pickle" and calls[3][1] == {"enabled": None}
    assert "the weight load's CUDA memory snapshot in" in capsys.readouterr().err


def test_the_detail_lists_each_segment_s_blocks_by_site_and_the_trace_compactly():
    snap = snapshot()
    snap["device_traces"] = [[{"action": "segment_alloc", "addr": 0, "size": 100 * MiB, "frames": REPACK},
                              {"action": "alloc", "addr": 0, "size": 80 * MiB, "frames": REPACK},
                              {"action": "snapshot", "addr": 0, "size": 0}]]
    d = alloc_snapshot.detail(snap)
    repack = d["sites"].index("srt/hardware_backend/gpu/quantization/gptq_kernels.py:320 process_weights_after_loading")
    assert [s["bytes"] for s in d["segments"]] == [100 * MiB, 40 * MiB, 2 * MiB]
    assert d["segments"][0]["blocks"] == [[80 * MiB, repack], [20 * MiB, "free"]]
    assert d["segments"][2]["blocks"][0][1] == d["sites"].index("?")
    assert d["events"] == [["segment_alloc", 100 * MiB, 0, repack], ["alloc", 80 * MiB, 0, repack]]
