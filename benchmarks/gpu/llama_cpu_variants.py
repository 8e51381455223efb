"""Keep only some of llama.cpp's x86 CPU-backend variants in its build (issue 18: llama.cpp on an AVX2-only desktop,
measured on the GPU host's cores). With -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON ggml builds one CPU backend
library a variant (haswell: AVX2 FMA F16C BMI2; sapphirerapids: AVX-512 VNNI BF16 AMX; ...) and loads the best one
the CPU runs from the executable's folder. All fifteen x86 variants cost a build minutes; this rewrites
ggml/src/CMakeLists.txt to the ones named, so one CUDA build gives both binaries: the folder as built (the best
variant here) and a copy without the better ones (haswell: what an AVX2-only desktop's llama.cpp runs).

    python3 benchmarks/gpu/llama_cpu_variants.py LLAMA_SRC haswell sapphirerapids

Exit 2 where the file or a named variant is not there (another llama.cpp layout): one line, nothing written.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

CALL = re.compile(r"^(\s*)ggml_add_cpu_backend_variant\((\w+)(?:\s[^)]*)?\)\s*$")


def keep(text: str, names: list[str]) -> tuple[str, list[str]]:
    """The CMakeLists text with the x86 variant calls not in `names` commented out; the variants it found."""
    out, found, x86 = [], [], False
    for line in text.splitlines(keepends=True):
        if 'GGML_SYSTEM_ARCH STREQUAL "x86"' in line and "if" in line:
            x86 = True
        elif x86 and re.match(r"\s*elseif\s*\(", line):
            x86 = False
        m = CALL.match(line)
        if x86 and m and m.group(2) != "tag_name":
            found.append(m.group(2))
            if m.group(2) not in names:
                line = f"{m.group(1)}# {line.lstrip()}"
        out.append(line)
    return "".join(out), found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: llama_cpu_variants.py LLAMA_SRC VARIANT...", file=sys.stderr)
        return 2
    path = Path(argv[0]) / "ggml" / "src" / "CMakeLists.txt"
    if not path.is_file():
        print(f"llama_cpu_variants: no {path}", file=sys.stderr)
        return 2
    text, found = keep(path.read_text(), argv[1:])
    if missing := [n for n in argv[1:] if n not in found]:
        print(f"llama_cpu_variants: {', '.join(missing)} not among {path}'s x86 variants ({', '.join(found) or 'none'})",
              file=sys.stderr)
        return 2
    path.write_text(text)
    print(f"llama.cpp x86 CPU variants: {', '.join(argv[1:])} of {len(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
