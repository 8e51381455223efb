"""Stand-in for `torchvision.io` (see the package docstring): names only, nothing decodes."""
import enum

from torchvision import _unavailable


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = RGB_ALPHA


decode_jpeg = _unavailable("torchvision.io.decode_jpeg")
decode_image = _unavailable("torchvision.io.decode_image")
