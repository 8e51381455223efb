"""Issue 20 item 7: `embed down` and `dashboard --stop` killed unrelated processes whose pids sat in their pid
files (`less vramkit/embed/server.py` matched "vramkit", "embed", "serve"). A pid record now names the exact
process (pid, start time, command line) and nothing else is signalled. And `embed up` with a new API key while
the service runs says so instead of ignoring the key."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from vramkit.adapters.process import record_pid, recorded_process, start_time
from vramkit.cli import main
from vramkit.commands.embed import _key_digest


@pytest.fixture
def bystander():
    """A process whose command line mentions vramkit, embed, serve and dashboard, as `less` on a source file
    would: it must survive every stop below."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "vramkit/embed/server.py",
                             "vramkit", "embed", "serve", "dashboard"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("record", ["bare", "wrong start time", "wrong command line"])
def test_stop_never_signals_a_process_the_record_does_not_name(record, bystander, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    rec = {"pid": bystander.pid, "create_time": start_time(bystander.pid),
           "cmdline": psutil.Process(bystander.pid).cmdline()}
    if record == "bare":
        text = str(bystander.pid)                   # what main wrote before
    elif record == "wrong start time":
        text = json.dumps(rec | {"create_time": rec["create_time"] - 100})
    else:
        text = json.dumps(rec | {"cmdline": ["python", "-m", "vramkit.commands.embed", "serve"]})
    for pid_file in (tmp_path / "embed.pid", tmp_path / "state" / "dashboard.pid"):
        pid_file.write_text(text)
    assert main(["embed", "down", "--data-dir", str(tmp_path)]) == 0
    assert main(["dashboard", "--stop"]) == 0
    out = capsys.readouterr().out
    assert "was not running" in out and bystander.poll() is None, "an unrelated process was signalled"


def test_the_recorded_process_is_found_and_stopped(bystander, tmp_path, monkeypatch, capsys):
    record_pid(tmp_path / "embed.pid", bystander.pid)
    assert recorded_process(tmp_path / "embed.pid")[0] == bystander.pid
    assert main(["embed", "down", "--data-dir", str(tmp_path)]) == 0
    assert f"stopped (pid {bystander.pid})" in capsys.readouterr().out
    assert bystander.wait(10) is not None


def test_up_with_another_key_while_running_says_so(bystander, tmp_path, monkeypatch, capsys):
    created = start_time(bystander.pid)
    record_pid(tmp_path / "embed.pid", bystander.pid, key=_key_digest("old-key", created))
    monkeypatch.setenv("VRAMKIT_EMBED_API_KEY", "new-key")
    assert main(["embed", "up", "--data-dir", str(tmp_path), "--port", "1"]) == 15
    err = capsys.readouterr().err
    assert "another API key" in err and "embed-down" in err and bystander.poll() is None
    monkeypatch.setenv("VRAMKIT_EMBED_API_KEY", "old-key")
    assert main(["embed", "up", "--data-dir", str(tmp_path), "--port", "1"]) == 0
    assert "already running" in capsys.readouterr().out


def test_start_time_is_the_kernels_count_since_boot_and_a_gone_pid_says_so(bystander):
    # seconds since boot, so a clock update cannot make a running process's record stop matching it: the bystander
    # started after this test's process and before now (/proc/uptime), whatever the wall clock did meanwhile
    with open("/proc/uptime") as fh:
        now = float(fh.read().split()[0])
    assert start_time(os.getpid()) <= start_time(bystander.pid) <= now + 0.01
    assert start_time(bystander.pid) == start_time(bystander.pid)
    bystander.kill()
    bystander.wait()
    with pytest.raises(psutil.NoSuchProcess):
        start_time(bystander.pid)


def test_a_record_waits_out_the_parent_s_and_the_empty_command_line_of_a_child_in_exec(tmp_path, monkeypatch):
    """Right after Popen a child reads the parent's command line until it execs, and an empty one while the kernel
    replaces its memory; the record names the program it became, never either of those."""
    import vramkit.adapters.process as process
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "serve"])
    try:
        real = psutil.Process(child.pid).cmdline()
        while real == psutil.Process().cmdline() or not real:
            real = psutil.Process(child.pid).cmdline()
        reads = iter([psutil.Process().cmdline(), [], [], real])

        class Seen(psutil.Process):
            def cmdline(self):
                return next(reads, real) if self.pid == child.pid else super().cmdline()
        monkeypatch.setattr(process.psutil, "Process", Seen)
        rec = record_pid(tmp_path / "x.pid", child.pid)
        assert rec["cmdline"] == real and next(reads, None) is None       # every read before it was waited out
        monkeypatch.undo()
        assert recorded_process(tmp_path / "x.pid")[0] == child.pid
    finally:
        child.kill()
        child.wait()
