"""`pip install .` gives a vramkit that reads its own config from any folder (issue 19 item 6).

The real pip builds the real wheel from a copy of the checkout's tracked files (so no build/ or egg-info lands
in the checkout) and installs it with --no-deps into a folder of its own; the kit's dependencies come from the
test interpreter. Then the installed console script plans the optimized preset from another folder. Before
config/ shipped in the package, that plan was exit 65 ("cannot read .../config/presets.toml").
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]


def _tracked_copy(dest: Path) -> None:
    """The files git tracks that the wheel is built from (links kept as links: vramkit/config -> ../config), as a
    fresh clone has them."""
    files = subprocess.run(["git", "ls-files", "-z", "pyproject.toml", "README.md", "vramkit", "config"], cwd=REPO,
                           capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src, dst = REPO / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue                     # deleted in the work tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    src, target = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("site")
    _tracked_copy(src)
    # --no-build-isolation: setuptools from this interpreter, no index needed
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return target


def _vramkit(installed: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMKIT_")}
    env["PYTHONPATH"] = str(installed)          # ahead of the checkout's editable install
    return subprocess.run([str(installed / "bin" / "vramkit"), *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_wheel_carries_the_catalog(installed):
    config = installed / "vramkit" / "config"
    assert config.is_dir() and not config.is_symlink()          # a copy, not a link back into a checkout
    assert {p.name for p in config.glob("*.toml")} >= {"gpus.toml", "models.toml", "presets.toml", "engine.toml",
                                                        "sglang.toml", "versions.toml"}
    assert (config / "models" / "qwen2.5-coder-14b-instruct-gptq-int4" / "config.json").is_file()
    # the installed package reads it (not the checkout's config/ through the editable install)
    r = subprocess.run([sys.executable, "-c", "from vramkit import catalog; print(catalog.CONFIG_DIR)"],
                       env={**os.environ, "PYTHONPATH": str(installed)}, capture_output=True, text=True, cwd="/")
    assert r.stdout.strip() == str(config)


def test_the_installed_tool_plans_the_optimized_preset_from_another_folder(installed, tmp_path):
    r = _vramkit(installed, tmp_path, "plan", "--preset", "optimized", "--host-ram-gib", "64", "--json")
    assert r.returncode == 0, r.stderr
    assert '"fits": true' in r.stdout
    where = subprocess.run([str(installed / "bin" / "vramkit"), "--version"], cwd=tmp_path, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(installed)})
    assert where.returncode == 0 and where.stdout.startswith("vramkit ")
    r = _vramkit(installed, tmp_path, "plan", "--list", "--json")       # the whole catalog, from the package
    assert r.returncode == 0 and "rtx-4060-ti-16gb" in r.stdout
