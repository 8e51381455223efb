#!/usr/bin/env bash
# Debian tools the dashboard's tests drive (issue 13), installed only when missing:
#   chromium          the real headless browser the dashboard test opens the page in
#   prometheus        for promtool, which checks services/prometheus/vramkit-alerts.yml
# systemd-analyze (package systemd) checks the rendered units; it is on every Debian with systemd.
# Runs apt-get only as root; otherwise it names what is missing and what to run, and exits 0: the tests
# that need a missing tool skip with that reason, so a non-root set-up still works.
# Usage: scripts/setup_test_tools.sh
set -euo pipefail

say() { printf 'setup-test-tools: %s\n' "$*" >&2; }

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "missing ${missing[*]} (not root or no apt-get): their tests will skip -> sudo apt-get install -y --no-install-recommends ${missing[*]}"
    exit 0
fi
say "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# the prometheus package would start its daemon: a set-up must not leave a server running
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq || say "apt-get update failed; trying the lists this machine has"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
say "installed ${missing[*]}"
