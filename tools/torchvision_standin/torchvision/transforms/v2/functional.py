"""Stand-in for `torchvision.transforms.v2.functional` (see the package docstring): every name raises when called."""
from torchvision import _unavailable


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _unavailable(f"torchvision.transforms.v2.functional.{name}")
