"""`vramkit pull MODEL`: download a checkpoint once, into a folder the kit remembers (vramkit/adapters/hub.py).

MODEL is a Hugging Face id (owner/name) or a catalogued name (its hf_id). The size is said before anything is
downloaded; the Hub library draws the progress bar; a pull that stopped (Ctrl-C, a dropped connection) resumes
from its partial files when run again. Afterwards `vramkit plan`, `vramkit up`, the compose file `up` writes
and `make install-service`'s units use the folder (--model-path), so nothing is downloaded a second time.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from vramkit import catalog
from vramkit.errors import Exit, VramkitError


def _repo_id(model: str) -> str:
    from vramkit.adapters import hub
    folded = {n.casefold(): m for n, m in catalog.models().items()}
    if model.casefold() in folded:
        return folded[model.casefold()].hf_id
    if hub.is_repo_id(model):
        return model
    raise VramkitError(f"{model!r} is neither a Hugging Face id (owner/name) nor a catalogued model",
                       catalog.suggest(model, list(catalog.models()), "model"), Exit.BAD_INPUT)


def run(args: argparse.Namespace) -> int:
    from vramkit.adapters import hub
    repo_id = _repo_id(args.model)
    plan = hub.plan_pull(repo_id, args.revision, Path(args.dir).expanduser() if args.dir else None)
    if args.json:
        print(json.dumps({"repo_id": plan.repo_id, "revision": plan.revision, "commit": plan.commit,
                          "folder": str(plan.folder), "total_bytes": plan.total_bytes,
                          "to_download_bytes": plan.to_fetch_bytes,
                          "files": [{"name": n, "bytes": b, "here": h} for n, b, h in plan.files]}, indent=2))
    else:
        print(plan.line(), flush=True)
    if args.dry_run:
        return 0
    folder = hub.pull(plan)
    if not args.json:
        print(f"pulled {repo_id} into {folder}: `vramkit plan --model {repo_id}` and `vramkit up` use this folder")
    return 0


def register(sub) -> None:
    p = sub.add_parser("pull", help="download a model once (size first, progress, resumable); plan/up use it",
                       description="Download a Hugging Face checkpoint (config, tokenizer, safetensors) into "
                                   "$VRAMKIT_MODELS_DIR (default ~/.local/share/vramkit/models) and record it, so "
                                   "`vramkit plan`, `vramkit up` and the service units load that folder. Says the "
                                   "size first; run it again to resume. $HF_ENDPOINT, $HF_TOKEN and $HF_HUB_OFFLINE "
                                   "are huggingface_hub's. Exit 26: the Hub cannot be reached; 64: no such model.")
    p.add_argument("model", help="a Hugging Face id (owner/name) or a catalogued model (its Hub id)")
    p.add_argument("--revision", metavar="REV", help="branch, tag or commit (default main)")
    p.add_argument("--dir", metavar="DIR", help="the folder to download into (default: under $VRAMKIT_MODELS_DIR)")
    p.add_argument("--dry-run", action="store_true", help="say what would be downloaded, and its size; fetch nothing")
    p.add_argument("--json", action="store_true", help="machine-readable listing")
    p.set_defaults(func=run)
