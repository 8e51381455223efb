"""`vramkit bench` through vramkit.cli.main: one-line errors with their exit codes, and --compare on
saved results (no server needed)."""
import json
import socket

from vramkit.cli import main
from vramkit.errors import Exit


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_unreachable_server_is_one_line_and_service_down(capsys, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    code = main(["bench", "--url", url, "--quick", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == Exit.SERVICE_DOWN
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"vramkit: SGLang at {url} is unreachable -> ")
    assert not (tmp_path / "r.json").exists()


def test_unknown_suite_is_bad_input(capsys):
    assert main(["bench", "--suites", "latency,warp"]) == Exit.BAD_INPUT
    assert "unknown suite(s) warp" in capsys.readouterr().err


def test_unreadable_planner_json_is_bad_file(capsys, tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    assert main(["bench", "--planner-json", str(bad), "--url", "http://127.0.0.1:1"]) == Exit.BAD_FILE
    assert capsys.readouterr().err.startswith(f"vramkit: cannot read planner JSON {bad}")


def test_compare_refuses_files_that_are_not_results(capsys, tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"hello": 1}))
    assert main(["bench", "--compare", str(a), str(a)]) == Exit.BAD_FILE
    assert "is not a vramkit bench result" in capsys.readouterr().err


def test_compare_writes_markdown_png_and_json_twin(capsys, tmp_path):
    from test_bench_report import _result

    paths = []
    for name, ttft, host in (("off", 1.05, None), ("on", 0.21, 10000)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(_result(name, revisit_ttft=ttft, host=host)))
        paths.append(str(p))
    out_md = tmp_path / "ab.md"
    assert main(["bench", "--compare", *paths, "--out", str(out_md), "--json"]) == Exit.OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["labels"] == ["off", "on"]
    assert printed["files"] == [str(out_md), str(tmp_path / "ab.png")]
    assert "| multi-turn TTFT p50 (revisits) | 1.05 s | 210.0 ms (-80 %) |" in out_md.read_text()
    assert (tmp_path / "ab.png").read_bytes()[:4] == b"\x89PNG"
