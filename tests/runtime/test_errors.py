"""Bad input gets a clear error naming the op, the shapes and the user's source line."""
import pytest

import aotgrad as ag


def test_broadcast_error_names_op_shapes_and_line():
    with pytest.raises(RuntimeError, match=r"add: .*\[2, 3\].*\[4\].*test_errors.py:\d+: "
                                           r"`ag.ones\(2, 3\) \+ ag.ones\(4\)`"):
        ag.ones(2, 3) + ag.ones(4)


def test_matmul_error_names_op_shapes_and_line():
    with pytest.raises(RuntimeError, match=r"matmul: .*2x3 and 4x2.*test_errors.py:\d+"):
        ag.ones(2, 3) @ ag.ones(4, 2)


def test_dtype_error_names_the_op():
    with pytest.raises(RuntimeError, match=r"matmul: .*float32.*float64.*test_errors.py"):
        ag.ones(2, 2) @ ag.ones(2, 2, dtype=ag.float64)


def test_prim_error_inside_compiled_function_names_the_user_line():
    cf = ag.compile(lambda x: x.reshape(5, 5), backend="interpret")
    with pytest.raises(RuntimeError, match=r"reshape.*test_errors.py:\d+"):
        cf(ag.ones(2, 3))


def test_cat_size_mismatch_names_the_dim_and_sizes():
    with pytest.raises(RuntimeError, match=r"cat: Sizes of tensors must match except in "
                                           r"dimension 1. Expected size 2 but got size 3"):
        ag.cat([ag.ones(2, 4), ag.ones(3, 4)], dim=1)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        ag.cat([ag.ones(2, 4), ag.ones(4)])
