"""`aotgrad.backends.cuda`: not built; `matmul.allow_tf32` and the other flags are kept for
scripts that set them."""


class _MatmulFlags:
    """`backends.cuda.matmul.allow_tf32 = True` etc.: recorded, without effect on the CPU."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    return False


def flash_sdp_enabled():
    return False


def mem_efficient_sdp_enabled():
    return False


def math_sdp_enabled():
    return True
