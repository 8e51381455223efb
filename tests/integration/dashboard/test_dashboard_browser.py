"""The dashboard as a person uses it: started by the CLI, opened in the real headless chromium, read
back from the DOM after the page's JavaScript ran (and screenshot)."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

from vramkit.adapters import nvml
from vramkit.dashboard.app import create_app
from vramkit.dashboard.sources import LiveSource
from vramkit.launch import reference

from .conftest import InProcess, chromium_dom, chromium_screenshot


class Dom(HTMLParser):
    """Text and attributes of every element with an id; svg rects by data-key."""

    def __init__(self, html: str):
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.rect_keys: list[str] = []
        self._open: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "rect" and a.get("data-key"):
            self.rect_keys.append(a["data-key"])
        if a.get("id"):
            self.by_id[a["id"]] = {"attrs": a, "text": ""}
        self._open.append(a.get("id"))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for i in self._open:
            if i:
                self.by_id[i]["text"] += data

    def text(self, i: str) -> str:
        return self.by_id[i]["text"].strip()

    def state(self, panel: str) -> str:
        return self.by_id[f"panel-{panel}"]["attrs"].get("data-state")


def no_gpu_here() -> bool:
    nvml.reset()
    return nvml.read_snapshot().status in ("no_nvml", "no_gpu")


def test_plan_explorer_renders_the_optimized_plan_and_live_says_no_gpu(dashboard_cli, tmp_path):
    url = dashboard_cli()
    # the reference desktop's RAM: how much a busy test machine has free must not decide the verdict
    dom = Dom(chromium_dom(url + f"/?host_ram_gib={reference.HOST_RAM_GIB:g}", tmp_path))
    for panel in ("plan", "live", "server", "bench"):
        assert dom.state(panel) == "ready", (panel, dom.text(f"panel-{panel}")[:300])
    assert dom.text("plan-verdict") == "FITS"
    assert "preset optimized" in dom.text("plan-out")
    command = dom.text("plan-command")
    assert command.startswith("python -m sglang.launch_server ")
    assert "--kv-cache-dtype fp8_e5m2" in command and "--mem-fraction-static 0.85" in command
    # the stacked bar: weights by part, the KV pool, graphs, activations, free
    for key in ("weights.mlp", "weights.embed_tokens", "kv", "graphs", "activations", "free"):
        assert key in dom.rect_keys
    if no_gpu_here():
        assert dom.text("live-status").startswith("no GPU")
        assert "Traceback" not in dom.text("live-out")
    assert "no SGLang server answers" in dom.text("server-status")
    assert "decode tok/s" in dom.text("bench-out") and "optimized-16g" in dom.text("bench-out")


def test_the_explorer_takes_a_card_and_knobs_from_the_address(dashboard_cli, tmp_path):
    """A plan that does not fit: the verdict, its reasons and the alternatives are drawn."""
    url = dashboard_cli()
    dom = Dom(chromium_dom(url + "/?panel=plan&preset=128k&model=qwen2.5-coder-14b-instruct-gptq-int4", tmp_path))
    assert dom.state("plan") == "ready"
    assert dom.text("plan-verdict") == "DOES NOT FIT"
    text = dom.text("plan-out")
    assert "what would fit instead" in text
    assert dom.by_id["panel-live"]["attrs"].get("hidden") is not None     # ?panel= shows one panel


def test_the_form_has_one_field_per_declared_knob(dashboard_cli, tmp_path):
    from vramkit.core.plan.knobs import specs
    url = dashboard_cli()
    html = chromium_dom(url + "/?panel=plan&hicache_gb=4", tmp_path)
    for spec in specs():
        assert f'name="{spec.name}"' in html, spec.name
    dom = Dom(html)
    assert "hierarchical KV cache" in dom.text("plan-out") and "3.73 GiB" in dom.text("plan-out")   # 4 GB


def test_bad_knob_is_one_line_on_the_page(dashboard_cli, tmp_path):
    url = dashboard_cli()
    dom = Dom(chromium_dom(url + "/?panel=plan&context=0", tmp_path))
    assert dom.state("plan") == "error"
    out = dom.text("plan-out")
    assert "--context '0' is not a whole number >= 1" in out and "-> give --context" in out and "\n" not in out.strip()


def test_live_panel_draws_a_card_with_its_lines_and_processes(monkeypatch, tmp_path, state_dir):
    """NVML faked at the hardware boundary (two cards, one nearly full); the page under real uvicorn
    in this process, in the real browser."""
    import nvml_scenarios as sc

    from vramkit.adapters.state import write_running
    sc.two_gpus().install(monkeypatch)
    write_running("vramkit-optimized", {"name": "vramkit-optimized", "gpu_indices": [0],
                                        "vram_budget_bytes": 15 * 2**30, "port": 1})
    with InProcess(create_app(LiveSource())) as url:
        dom = Dom(chromium_dom(url + "/?panel=live", tmp_path))
    nvml.reset()
    assert dom.state("live") == "ready"
    text = dom.text("live-out")
    assert "GPU 0: NVIDIA GeForce RTX 4080" in text and "GPU 1: NVIDIA GeForce RTX 4090" in text
    assert "sglang::scheduler" in text
    assert "71 °C" in text
    assert all(f"{t}%" in text for t in (85, 90, 95))
    assert "no GPU" not in text
    assert "plan line: vramkit-optimized's vram-safe budget 15.00 GiB" in text     # the recorded server's line
    assert text.count("plan line") == 1                                              # on its GPU only


def test_screenshot_is_a_png(dashboard_cli, tmp_path):
    url = dashboard_cli()
    png = chromium_screenshot(url + "/?panel=plan", tmp_path / "plan.png", tmp_path)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_with_an_api_key_the_page_needs_it(dashboard_cli, tmp_path):
    url = dashboard_cli(env={"VRAMKIT_DASHBOARD_API_KEY": "s3cret-key"})
    denied = chromium_dom(url + "/", tmp_path)
    assert "missing or wrong API key" in denied and "plan-form" not in denied
    dom = Dom(chromium_dom(url + f"/?key=s3cret-key&host_ram_gib={reference.HOST_RAM_GIB:g}",  # then a cookie
                           tmp_path))
    assert dom.state("plan") == "ready" and dom.text("plan-verdict") == "FITS"
    assert dom.state("bench") == "ready"


@pytest.mark.parametrize("panel", ["plan", "live", "server", "bench"])
def test_each_panel_alone_is_ready(dashboard_cli, tmp_path, panel):
    url = dashboard_cli()
    dom = Dom(chromium_dom(url + f"/?panel={panel}", tmp_path))
    assert dom.state(panel) == "ready"


def test_a_model_folder_from_the_address_is_planned(dashboard_cli, tmp_path):
    """A folder with a config.json (here: the catalogued 7B GPTQ's own folder, given by path)."""
    from .conftest import REPO
    folder = REPO / "config" / "models" / "qwen2.5-coder-7b-instruct-gptq-int4"
    url = dashboard_cli()
    dom = Dom(chromium_dom(url + f"/?panel=plan&model={folder}", tmp_path))
    assert dom.state("plan") == "ready"
    assert dom.text("plan-verdict") in ("FITS", "DOES NOT FIT")
    assert "qwen2.5-coder-7b-instruct-gptq-int4" in dom.text("plan-out")


def test_history_builds_up_with_no_page_open(monkeypatch, state_dir):
    """A page opened later still shows the last minutes: the dashboard samples the card itself."""
    import time

    import httpx
    import nvml_scenarios as sc
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    source = LiveSource()
    with InProcess(create_app(source, sample_s=0.5)) as url:
        deadline = time.monotonic() + 20                    # ~1 point a second: 3 in ~3 s, longer on a loaded host
        while len(source._history) < 3 and time.monotonic() < deadline:
            time.sleep(0.25)                                # no request: only the dashboard's own sampler adds
        history = httpx.get(url + "/api/live", timeout=10).json()["history"]
    nvml.reset()
    assert len(history) >= 3, history                       # built up with no page open; the page sees it
    steps = [b["time_s"] - a["time_s"] for a, b in zip(history, history[1:], strict=False)]
    assert min(steps) >= 1.0


def test_no_gpu_stops_the_sampler(state_dir):
    import httpx
    if not no_gpu_here():
        pytest.skip("this host has a GPU")
    source = LiveSource()
    with InProcess(create_app(source, sample_s=0.2)) as url:
        import time
        time.sleep(1.0)
        assert len(source._history) <= 1                   # one reading, then the sampler stopped
        assert httpx.get(url + "/api/live", timeout=10).json()["status_line"].startswith("no GPU")
