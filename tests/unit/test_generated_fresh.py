"""Text generated from data (the knob table in config/presets.toml, the README's preset, roofline and
physics tables) matches a fresh render, as the compose files do (test_compose_fresh.py)."""
from __future__ import annotations

import pytest

from vramkit import generated
from vramkit.errors import Exit, VramkitError


@pytest.mark.parametrize("block", generated.BLOCKS, ids=lambda b: f"{b.path.name}: {b.name}")
def test_committed_block_is_fresh(block):
    text = block.path.read_text()
    assert generated.render_file(text, block) == text, f"{block.path.name}: {block.name} is stale: run `make compose`"


def test_a_block_is_replaced_between_its_markers_only():
    block = generated.Block(generated.REPO_ROOT / "x.md", "t", lambda: ["new 1", "new 2"], generated.HTML)
    begin, end = block.markers()
    text = f"before\n{begin}\nold\n{end}\nafter\n"
    assert generated.render_file(text, block) == f"before\n{begin}\nnew 1\nnew 2\n{end}\nafter\n"
    with pytest.raises(VramkitError) as e:
        generated.render_file("no markers\n", block)
    assert e.value.code == Exit.BAD_FILE


def test_the_readme_ceiling_is_the_planners():
    """The issue's drift: the README said 393 tok/s for the H100 while `vramkit plan` said otherwise."""
    ceiling, _ = generated._ceiling("h100-80gb", 1024)
    readme = (generated.REPO_ROOT / "README.md").read_text()
    assert f"{ceiling:.1f} tok/s" in readme
