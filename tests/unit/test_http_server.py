"""vramkit/adapters/http_server.py's pure parts: the connection cap fitted under the open-files limit (issue 20
item 2: under a soft limit of 1,024, 1,010 idle connections shut the service out while its cap was 4,096),
one log line per window, the Host header's name."""
from __future__ import annotations

import logging
import resource

from vramkit.adapters.http_server import (
    FD_RESERVE,
    ConnectionLimits,
    RateLimitedLog,
    fit_to_open_files,
    host_name,
    raise_open_files_limit,
)


def test_the_cap_fits_under_the_open_files_limit():
    limits = ConnectionLimits(max_connections=4096)
    assert fit_to_open_files(limits, 1024).max_connections == 1024 - FD_RESERVE
    assert fit_to_open_files(limits, 65536) == limits
    assert fit_to_open_files(limits, 100).max_connections == 16     # never none at all


def test_the_soft_limit_is_raised_as_far_as_the_hard_one_allows():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
        got = raise_open_files_limit(4096)
        assert got == (4096 if hard == resource.RLIM_INFINITY else min(4096, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_flood_is_one_line_per_window(caplog):
    log = RateLimitedLog(logging.getLogger("test.flood"), every_s=60)
    caplog.set_level(logging.INFO)
    said = [log.say("client went away") for _ in range(1000)]
    assert said.count(True) == 1 and caplog.text.count("went away") == 1
    log._last -= 61
    assert log.say("client went away") and "and 999 more" in caplog.text


def test_host_names():
    assert host_name("127.0.0.1:8002") == "127.0.0.1"
    assert host_name("[::1]:8003") == "[::1]"
    assert host_name("Evil.Example") == "evil.example"
