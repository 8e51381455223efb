"""Exit codes are distinct, so scripts can branch on them: the only shared numbers are vram-safe's
monitoring-plugin aliases (0-3). Issue 10's NO_SGLANG first took 20, which STOP_FAILED had taken meanwhile on
another branch: an IntEnum silently makes such a second name an alias, and this test is what notices."""
from __future__ import annotations

from vramkit.errors import Exit

MONITORING_ALIASES = {"VRAM_OK", "VRAM_WARNING", "VRAM_CRITICAL", "VRAM_UNKNOWN"}


def test_every_exit_code_is_its_own_number():
    aliases = {name for name, member in Exit.__members__.items() if member.name != name}
    assert aliases == MONITORING_ALIASES


def test_vram_safe_speaks_the_monitoring_plugin_convention():
    assert [int(Exit[n]) for n in ("VRAM_OK", "VRAM_WARNING", "VRAM_CRITICAL", "VRAM_UNKNOWN")] == [0, 1, 2, 3]
    assert int(Exit.BAD_INPUT) == 64
