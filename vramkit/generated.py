"""Blocks of committed text generated from data: each sits between a BEGIN and an END marker line in its
file, `vramkit compose` (`make compose`) rewrites it, and tests/unit/test_generated_fresh.py fails when
a committed block differs from a fresh render. Text outside the markers is the author's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vramkit import catalog
from vramkit.core import knobs
from vramkit.errors import Exit, VramkitError

REPO_ROOT = catalog.CONFIG_DIR.parent


@dataclass(frozen=True)
class Block:
    path: Path                       # the file that holds it
    name: str                        # the marker's name
    render: Callable[[], list[str]]  # the block's lines, markers excluded
    comment: tuple[str, str] = ("# ", "")   # how a marker line is commented in that file

    def markers(self) -> tuple[str, str]:
        a, b = self.comment
        return (f"{a}BEGIN GENERATED {self.name}: `make compose` writes it, do not edit{b}",
                f"{a}END GENERATED {self.name}{b}")


BLOCKS: tuple[Block, ...] = (
    Block(catalog.CONFIG_DIR / "presets.toml", "knob table (vramkit/core/knobs.py)", knobs.doc_table),
)


def render_file(text: str, block: Block) -> str:
    """`text` with the block between its markers replaced by a fresh render."""
    begin, end = block.markers()
    lines = text.split("\n")
    try:
        i, j = lines.index(begin), lines.index(end)
    except ValueError:
        raise VramkitError(f"{block.path.name}: the markers of the generated {block.name} are missing",
                           f"restore the lines '{begin}' and '{end}' from git", Exit.BAD_FILE) from None
    if j < i:
        raise VramkitError(f"{block.path.name}: END before BEGIN of {block.name}", "restore it from git", Exit.BAD_FILE)
    return "\n".join(lines[: i + 1] + block.render() + lines[j:])


def stale_blocks(*, write: bool) -> list[str]:
    """'file: block' for each generated block that differs from a fresh render; with `write`, rewrite it."""
    stale = []
    for block in BLOCKS:
        current = block.path.read_text()
        fresh = render_file(current, block)
        if fresh != current:
            stale.append(f"{block.path.name}: {block.name}")
            if write:
                block.path.write_text(fresh)
    return stale
