"""`aotgrad.backends.mkldnn`: oneDNN is not used (convolutions are aotgrad's own); the flag is
kept for scripts that set it."""
enabled = True


def is_available():
    return False
