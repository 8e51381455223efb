"""Issue 10, items 1 and 4: every bad path is a 4xx or a skipped file with its reason, never a
500, and a swap mid-walk cannot leave the root. Against the real app under uvicorn."""
from __future__ import annotations

import os
import shutil
import socket
import stat

import httpx

from .conftest import wait_for


def test_bad_repository_paths_are_4xx_never_500(serve, repos, tmp_path):
    os.symlink("loop_b", repos / "loop_a")
    os.symlink("loop_a", repos / "loop_b")
    os.mkfifo(repos / "fifo")
    os.mknod(repos / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (repos / "file.txt").write_text("x\n")
    cases = [
        (str(repos / "loop_a"), 422, "symlink loop"),
        (str(repos / "loop_a" / "sub"), 422, "symlink loop"),
        (str(repos) + "/a\x00b", 422, "NUL byte"),
        (str(repos) + "/" + "d/" * 2100, 422, "paths are at most"),
        (str(repos / ("n" * 300)), 422, "names are at most"),
        (str(repos / "fifo"), 404, "not a folder"),
        (str(repos / "null"), 404, "not a folder"),
        (str(repos / "file.txt"), 404, "not a folder"),
        (str(repos / "missing"), 404, "not a folder"),
        ("/dev/null", 403, "outside the allowed roots"),
        ("relative/path", 422, "relative"),
        (["a"], 422, "as a string"),
    ]
    srv = serve()
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        for path, status, says in cases:
            r = http.post("/precache/repo", json={"path": path})
            assert r.status_code == status, (repr(path)[:80], r.status_code, r.text[:200])
            assert says in r.json()["error"]["message"], (repr(path)[:80], r.text[:200])
        r = http.post("/precache/repo", json={"path": str(repos), "depth": 1})
        assert r.status_code == 422 and "unknown field" in r.text


def _deep_file(top: str) -> str:
    """A file whose path is longer than PATH_MAX (4096 bytes): made with dir fds, as git can."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    name = "d" * 200
    for _ in range(25):                               # 25 x 201 bytes > 4096
        os.mkdir(name, dir_fd=fd)
        nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    out = os.open("deep.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, b"def deep():\n    return 'below PATH_MAX'\n")
    os.close(out)
    os.close(fd)
    return "def deep():\n    return 'below PATH_MAX'\n"


def test_bad_files_inside_a_repo_are_skipped_with_their_reason_and_the_job_completes(serve, repos):
    repo = repos / "hostile"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "ok.py").write_text("def ok():\n    return 1\n")
    os.symlink("self", repo / "self")                      # a one-link loop
    os.symlink("ping", repo / "pong")
    os.symlink("pong", repo / "ping")                      # a two-link loop
    os.symlink(".", repo / "src" / "again")                # a folder link back into the repo
    os.symlink("/nonexistent/target", repo / "dangling")
    os.mkfifo(repo / "pipe")
    os.mknod(repo / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(repo / "sock"))
    deep_text = _deep_file(str(repo))
    srv = serve()
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            r = http.post("/precache/repo", json={"path": str(repo)})
            assert r.status_code == 200, r.text[:300]
            job = r.json()
            assert job["state"] == "done", job
            assert job["files_embedded"] == 2                  # ok.py and the deep file
            assert job["skipped"] == {"symlink_loop": 3, "symlink": 1, "symlink_dangling": 1,
                                      "fifo": 1, "device": 1, "socket": 1}, job["skipped"]
            assert job["skipped_examples"]["fifo"] == [str(repo / "pipe")]
            assert http.post("/embed", json={"text": deep_text}).json()["cached"] == [True]
    finally:
        sock.close()


def test_a_folder_swapped_for_a_link_mid_walk_cannot_leave_the_root(serve, repos, tmp_path):
    """The issue's attack: swap a folder for a link to outside while precache reads files."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = "root:x:0:\nsecret-group:x:1000:the-password-is-hunter2\n"
    (outside / "group").write_text(secret)
    repo = repos / "race"
    (repo / "a").mkdir(parents=True)
    for i in range(60):                                    # read first: keeps the job busy
        (repo / "a" / f"f{i:02d}.py").write_text(f"def f{i}():\n    return {i} * {i}\n" * 8)
    (repo / "zz").mkdir()
    (repo / "zz" / "group").write_text("placeholder\n")
    (repo / "zz2").mkdir()
    (repo / "zz2" / "gone.py").write_text("print('deleted before it is read')\n")
    srv = serve(precache_batch=4)
    with httpx.Client(base_url=srv.url, timeout=120) as http:
        job = http.post("/precache/repo", json={"path": str(repo), "wait": False}).json()
        poll = job["poll"]
        assert job["state"] == "embedding" and job["files_done"] < 50, job
        shutil.rmtree(repo / "zz")
        os.symlink(outside, repo / "zz")                   # zz/group now means outside/group
        (repo / "zz2" / "gone.py").unlink()                # vanishes before it is read
        assert wait_for(lambda: http.get(poll).json()["state"] != "embedding", 120, 0.1)
        job = http.get(poll).json()
        leaked = http.post("/embed", json={"text": secret}).json()
        assert leaked["cached"] == [False], "the file outside the root was read and cached"
        assert job["state"] == "done", job
        assert job["skipped"].get("changed") == 1 and job["skipped"].get("vanished") == 1, job
        assert job["skipped_examples"]["changed"] == [str(repo / "zz" / "group")]
