"""The committed docker-compose.qwen*.yml files are exactly what config/ renders today."""
from vramkit.launch.compose_files import compose_files


def test_committed_compose_files_are_not_stale():
    stale = [p.name for p, text in compose_files().items() if not p.exists() or p.read_text() != text]
    assert not stale, f"stale compose files {stale}: run `make compose` and commit"


def test_one_compose_file_per_preset():
    names = sorted(p.name for p in compose_files())
    assert names == ["docker-compose.qwen-128k.yml", "docker-compose.qwen-moe.yml", "docker-compose.qwen-optimized.yml",
                     "docker-compose.qwen.yml"]
