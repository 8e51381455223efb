#!/usr/bin/env python3
"""Host preparation (same as `vramkit host`): CPU sets, NUMA, memlock/pinned memory, --pin PID, --warmup."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a plain checkout

from vramkit.cli import main

if __name__ == "__main__":
    sys.exit(main(["host", *sys.argv[1:]]))
