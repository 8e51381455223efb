#!/usr/bin/env bash
# Renders the dashboard's panels as PNGs with headless chromium (the README's screenshots):
# starts `vramkit dashboard` on a free local port (live, or --replay DIR), waits for /health, shoots
# each panel alone (?panel=NAME) into OUT/dashboard-NAME.png, then stops the dashboard it started.
# Usage: scripts/dashboard_screenshots.sh [--replay DIR] [--panels "plan live server bench"] [--out docs]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PY:-.venv/bin/python}
replay=""
panels="plan live server bench"
out=docs
while [ $# -gt 0 ]; do
    case "$1" in
        --replay) replay=$2; shift 2 ;;
        --panels) panels=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "dashboard-screenshots: unknown argument $1 -> see the usage line in $0" >&2; exit 64 ;;
    esac
done
command -v chromium >/dev/null || { echo "dashboard-screenshots: no chromium -> make setup-test-tools" >&2; exit 1; }
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$py" -m vramkit dashboard --port "$port" ${replay:+--replay "$replay"} >"$log" 2>&1 &
pid=$!
profile=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; rm -rf "$log" "$profile"' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.2
done
mkdir -p "$out"
for panel in $panels; do
    case "$panel" in            # heights that fit each panel's content at this width
        plan) size=1000,1180 ;;
        live) size=1000,${LIVE_HEIGHT:-$([ -n "$replay" ] && echo 640 || echo 300)} ;;
        server) size=1000,${SERVER_HEIGHT:-$([ -n "$replay" ] && echo 1100 || echo 240)} ;;
        bench) size=1000,1000 ;;
        *) echo "unknown panel $panel" >&2; exit 64 ;;
    esac
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
        --virtual-time-budget=8000 --window-size="$size" \
        --screenshot="$out/dashboard-$panel.png" "http://127.0.0.1:$port/?panel=$panel" 2>/dev/null
    # a palette of 256 colours keeps the committed PNGs small (Pillow comes with matplotlib, the bench extra)
    "$py" - "$out/dashboard-$panel.png" <<'PY' || true
import sys
from PIL import Image
path = sys.argv[1]
Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
PY
    echo "wrote $out/dashboard-$panel.png ($(stat -c %s "$out/dashboard-$panel.png") bytes)"
done
