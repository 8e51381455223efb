"""The pure core: plain values in, plain values out. No NVML, Docker, subprocess, HTTP, Redis
or terminal here (tests/unit/test_layering.py enforces it)."""
