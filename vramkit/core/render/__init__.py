"""A resolved plan as text: SGLang's argument list and a Docker Compose service (sglang.py)."""
