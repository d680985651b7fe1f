"""`aotgrad.backends.cudnn`: not available; its flags are kept for scripts that set them."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


def version():
    return None
