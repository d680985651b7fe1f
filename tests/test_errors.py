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
