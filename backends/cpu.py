"""`aotgrad.backends.cpu`."""


def get_cpu_capability():
    """The widest SIMD level of this CPU that compiled kernels can use: 'AVX512', 'AVX2' or
    'DEFAULT' (PyTorch's names)."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features:
        return "AVX512"
    if "+avx2" in features:
        return "AVX2"
    return "DEFAULT"
