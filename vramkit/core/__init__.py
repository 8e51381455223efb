"""The pure core: plain values in, plain values out. No NVML, Docker, subprocess, HTTP, Redis
or terminal here (tests/unit/test_layering.py enforces it).

The planner's family, in the order a plan is made:
  model/    what a model is: its shape (spec.py), every tensor SGLang allocates for it (arch.py), the
            tensors of its checkpoint (checkpoint.py)
  memory/   what it costs on a GPU: weights, KV pool and activations (costs.py), the weight load replayed
            through PyTorch's caching allocator (weight_load.py, torch_alloc.py)
  plan/     the request as asked (request.py), the launch knobs (knobs.py), the plan and its alternatives
            (planner.py), the KT hybrid mode (kt_hybrid.py)
  render/   a plan as SGLang's argument list and a compose service (sglang.py)
Pure logic that several features share:
  gpu/      what NVML said at one moment (snapshot.py), the monitor's rules (vram.py) and text (vram_text.py)
  checks.py, na.py, host_plan.py, sglang_log.py, bench_stats.py
Pure modules only one feature uses live beside that feature (dashboard/view.py, embed/keys.py,
launch/systemd_units.py); the layering test holds them to the same rules."""
