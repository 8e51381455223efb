"""vramkit: serve a large code LLM with SGLang on a GPU too small for it."""

__version__ = "0.1.0"
