"""What NVML said about the GPUs at one moment (snapshot.py), the monitor's and vram-safe's rules (vram.py) and
their plain-text form (vram_text.py)."""
