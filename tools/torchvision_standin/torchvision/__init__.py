"""STAND-IN, NOT THE REAL torchvision. Installed only into vramkit's SGLang checking environment (.venv-sglang).

Why it exists: SGLang 0.5.15.post1's `sglang.srt.utils.common` runs `from torchvision.io import decode_jpeg`
at module level, so importing SGLang's argument parser (`sglang.srt.server_args`) needs a `torchvision`.
No CPU-only torchvision wheel fits torch 2.13.0+cpu: the registry's wheels pull a CUDA torch of several GB
and cannot load beside a CPU torch. Argument parsing, `ServerArgs(device="cpu")` and
`ModelConfig.from_server_args` never decode, resize or read an image.

So this package provides only the names that import chain binds at import time:
- `torchvision.io.decode_jpeg`                      (sglang.srt.utils.common)
- `torchvision.io.ImageReadMode`, `decode_image`,
  `torchvision.transforms.InterpolationMode`,
  `torchvision.transforms.functional.pil_to_tensor`,
  `torchvision.transforms.v2.functional`            (transformers 5.12.1 image_utils / image_processing_utils:
                                                     transformers decides "torchvision available" by
                                                     importlib.util.find_spec alone, so it binds these too)
Every function here raises `StandinUsed` when called: if a check ever reaches image code, it fails loudly
instead of computing something false. See /work/shared/gpu/README.md ("Traps") and
scripts/setup_sglang_check.sh, which copies this folder into .venv-sglang's site-packages.
"""

__version__ = "0.0.0+vramkit.standin"
STANDIN = True


class StandinUsed(RuntimeError):
    """A torchvision function was called inside vramkit's SGLang checking environment."""


def _unavailable(qualname: str):
    def fn(*args, **kwargs):
        raise StandinUsed(
            f"torchvision stand-in: {qualname} was called; vramkit's SGLang checking environment only parses "
            "arguments and reads config.json and has no real torchvision"
        )

    fn.__name__ = qualname.rsplit(".", 1)[-1]
    fn.__qualname__ = qualname
    return fn
