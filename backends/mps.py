"""`aotgrad.backends.mps`: Apple's Metal backend is neither built nor available."""


def is_available():
    return False


def is_built():
    return False
