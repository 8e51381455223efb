#!/usr/bin/env python3
"""Live VRAM monitor (same as `vramkit monitor`); all flags pass through: --interval, --log, --once --json..."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a plain checkout

from vramkit.cli import main

if __name__ == "__main__":
    sys.exit(main(["monitor", *sys.argv[1:]]))
