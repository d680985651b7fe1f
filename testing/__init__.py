"""Test helpers: assert_close, and compare_with_eager (compiled vs eager outputs and grads)."""
from aotgrad.testing.compare import assert_close, compare_with_eager
