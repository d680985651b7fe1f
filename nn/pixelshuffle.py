"""PixelShuffle and PixelUnshuffle: move r*r channels into an r-times larger image and back.

>>> nn.PixelShuffle(2)(aotgrad.ones(1, 8, 3, 3)).shape
aotgrad.Size([1, 2, 6, 6])
"""
from aotgrad.nn import functional as F
from aotgrad.nn.module import Module


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"
