"""Launching SGLang, as one part: resolve a request into a plan (resolve.py), check before starting
(checks.py), the pieces and the order of `up`/`down` (steps.py, up.py), the committed compose files
(compose_files.py) and every launch the kit can render, for the real-parser test (cases.py).
`vramkit/commands/` only parses arguments and prints."""
