"""The precache walk on a real folder tree: gitignore, binary, size cap, symlinks, path rules."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from vramkit.embed.precache import read_file, resolve_repo, walk_repo
from vramkit.embed.requests import BadRequest


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """allowed/repo with every kind of file the walk must judge, and a secret outside the root."""
    allowed = tmp_path / "allowed"
    repo = allowed / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    (repo / "build").mkdir()
    (repo / ".git").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("password=hunter2\n")
    (repo / ".gitignore").write_text("*.log\n!keep.log\nbuild/\n")
    (repo / "src" / ".gitignore").write_text("generated_*.py\n")
    (repo / "src" / "main.py").write_text("def main():\n    return 1\n")
    (repo / "src" / "generated_api.py").write_text("x = 1\n")
    (repo / "src" / "deep" / "util.py").write_text("def util():\n    pass\n")
    (repo / "app.log").write_text("noise\n")
    (repo / "keep.log").write_text("kept\n")
    (repo / "build" / "out.txt").write_text("artifact\n")
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (repo / "big.txt").write_text("a" * ((1 << 20) + 1))
    (repo / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    os.symlink(outside / "secret.txt", repo / "leak.txt")
    os.symlink(outside, repo / "leakdir")
    os.symlink(repo / "src" / "main.py", repo / "alias.py")
    return {"allowed": allowed, "repo": repo, "outside": outside}


def test_walk_honours_gitignore_and_never_follows_links(tree):
    repo = tree["repo"]
    w = walk_repo(repo)
    rel = sorted(p.relative_to(repo).as_posix() for p in w.files)
    assert rel == [".gitignore", "big.txt", "image.png", "keep.log", "latin1.txt",
                   "src/.gitignore", "src/deep/util.py", "src/main.py"]
    assert w.skipped == {"gitignored": 2, "gitignored_dir": 1, "symlink_outside": 2, "symlink": 1}
    assert not any("secret" in str(p) or ".git/" in str(p) for p in w.files)


def test_gitignore_above_the_repo_counts_only_inside_the_allowed_roots(tree):
    (tree["allowed"] / ".gitignore").write_text("*.py\n")
    files = {p.name for p in walk_repo(tree["repo"], roots=[tree["allowed"]]).files}
    assert "main.py" not in files and "keep.log" in files
    files = {p.name for p in walk_repo(tree["repo"], roots=[tree["repo"]]).files}
    assert "main.py" in files          # the parent's .gitignore is outside this root: not read


def test_read_file_skips_binary_large_and_undecodable(tree):
    repo = tree["repo"]
    assert read_file(repo / "image.png") == (None, "binary")
    assert read_file(repo / "big.txt") == (None, "too_large")
    assert read_file(repo / "latin1.txt") == (None, "undecodable")
    assert read_file(repo / "leak.txt") == (None, "symlink")     # O_NOFOLLOW, even if asked
    assert read_file(repo / "src" / "main.py") == ("def main():\n    return 1\n", None)


def test_resolve_repo_keeps_requests_inside_the_allowed_roots(tree):
    roots = [tree["allowed"].resolve()]
    assert resolve_repo(str(tree["repo"]), roots) == tree["repo"].resolve()
    cases = [
        (str(tree["repo"] / ".." / ".." / "outside"), 403, "outside the allowed roots"),
        (str(tree["repo"] / "leakdir"), 403, "outside the allowed roots"),   # a link out
        ("repo", 422, "relative"),
        (str(tree["allowed"] / "nope"), 404, "not a folder"),
        (123, 422, "as a string"),
    ]
    for path, status, says in cases:
        with pytest.raises(BadRequest) as err:
            resolve_repo(path, roots)
        assert err.value.status == status and says in err.value.message, path
    with pytest.raises(BadRequest, match="no allowed roots"):
        resolve_repo(str(tree["repo"]), [])


_WALK_AND_READ = """
import json, sys
from pathlib import Path
from vramkit.embed.precache import read_file, walk_repo
w = walk_repo(Path(sys.argv[1]))
skipped = dict(w.skipped)
for p in w.files:
    text, reason = read_file(p)
    if reason:
        skipped[reason] = skipped.get(reason, 0) + 1
print(json.dumps({"skipped": skipped, "files": sorted(p.name for p in w.files)}))
"""


def test_unreadable_files_and_folders_are_skipped_by_reason(tmp_path):
    """Real permissions: run as root, the walk runs without CAP_DAC_* (setpriv), so 0000 applies."""
    import json
    import shutil
    import subprocess
    import sys

    repo = tmp_path / "repo"
    (repo / "locked").mkdir(parents=True)
    (repo / "ok.py").write_text("x = 1\n")
    (repo / "secret.py").write_text("y = 2\n")
    (repo / "locked" / "inner.py").write_text("z = 3\n")
    os.chmod(repo / "secret.py", 0)
    os.chmod(repo / "locked", 0)
    cmd = [sys.executable, "-c", _WALK_AND_READ, str(repo)]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root and no setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             cwd=Path(__file__).resolve().parents[2])
    finally:
        os.chmod(repo / "locked", 0o755)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["skipped"] == {"unreadable_dir": 1, "unreadable": 1}, got
    assert got["files"] == ["ok.py", "secret.py"]
