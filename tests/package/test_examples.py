"""Run every example's main() at a reduced size and check what it prints and returns."""
import os
import re

import numpy as np
import pytest




def _printed_float(out, label):
    m = re.search(re.escape(label) + r"\s*([-+0-9.e]+)", out)
    assert m, f"{label!r} not printed:\n{out}"
    return float(m.group(1))


def _check_compiled_half(res, out):
    # a crash of the compiled path is a failure (the example reports it and carries on)
    assert "compile_error" not in res, f"compiled run failed: {res['compile_error']}"
    assert res["compiled"]
    diff = _printed_float(out, "largest loss difference eager vs compiled:")
    assert diff == pytest.approx(res["max_loss_diff"], rel=1e-2, abs=1e-12)
    assert diff < 1e-4  # same weights, same batches: float32 rounding only


def test_linear_regression_recovers_weight_and_bias(example, capsys):
    res = example("linear_regression").main(["--epochs", "700", "--no-progress"])
    out = capsys.readouterr().out
    assert abs(res["weight"] - 0.7) < 0.02 and abs(res["bias"] - 0.3) < 0.02
    m = re.search(r"learned: weight=([-0-9.]+) bias=([-0-9.]+)", out)
    assert m, out
    assert float(m.group(1)) == pytest.approx(res["weight"], abs=1e-4)
    assert float(m.group(2)) == pytest.approx(res["bias"], abs=1e-4)
    assert res["test_loss"] < 0.05


@pytest.mark.parametrize("target", ["loss", "model"])
def test_train_mlp_quick(example, capsys, tmp_path, target):
    res = example("train_mlp").main(["--quick", "--steps", "40", "--no-progress", "--dump",
                                     str(tmp_path / "ir"), "--compile", target])
    out = capsys.readouterr().out
    assert res["eager_accuracy"] > 0.5  # chance is 0.1
    assert _printed_float(out, "test accuracy") == pytest.approx(res["eager_accuracy"],
                                                                 abs=1e-3)
    assert res["eager_losses"][-1] < res["eager_losses"][0]
    assert "ms/step" in out
    _check_compiled_half(res, out)
    if res["compiled"]:
        assert abs(res["compiled_accuracy"] - res["eager_accuracy"]) <= 0.01
        assert "speed-up per step" in out
        assert f"IR dumped to: {tmp_path / 'ir'}" in out
        dumped = os.listdir(tmp_path / "ir")
        assert dumped and "forward.py" in os.listdir(tmp_path / "ir" / dumped[0])


def test_train_mlp_no_compile_flag(example, capsys):
    res = example("train_mlp").main(["--quick", "--steps", "5", "--no-progress",
                                     "--no-compile"])
    assert not res["compiled"] and "compiled: skipped" in capsys.readouterr().out


def test_cnn_digits(example, capsys):
    res = example("cnn_digits").main(["--steps", "40", "--channels", "4", "--no-progress"])
    out = capsys.readouterr().out
    assert "Conv2d(1, 4, kernel_size=(3, 3)" in out and "MaxPool2d" in out
    losses = res["eager_losses"]
    assert losses[-5:].mean() < losses[:5].mean() - 0.5
    assert res["eager_accuracy"] > 0.4  # chance is 0.1
    _check_compiled_half(res, out)


def test_transformer_block(example, capsys):
    res = example("transformer_block").main(["--steps", "25", "--dim", "16", "--heads", "2",
                                             "--seq-len", "8", "--no-progress"])
    out = capsys.readouterr().out
    losses = res["eager_losses"]
    assert losses[-1] < res["chance"] < losses[0] + 0.5
    assert losses[-3:].mean() < losses[:3].mean() - 0.3
    _check_compiled_half(res, out)


def test_custom_function(example, capsys):
    res = example("custom_function").main(["--steps", "30", "--hidden", "16", "--no-progress"])
    out = capsys.readouterr().out
    assert res["backward_error"] < 1e-12
    assert _printed_float(out, "max difference") < 1e-12
    assert "SquarePlusModule(b=4.0)" in out
    assert res["eager_losses"][-1] < res["eager_losses"][0]
    _check_compiled_half(res, out)


def test_workflow(example, capsys, tmp_path):
    res = example("workflow").main(["--epochs", "8", "--n", "200", "--out-dir", str(tmp_path),
                                    "--quiet"])
    out = capsys.readouterr().out
    hist = res["history"]
    assert len(hist["train"]) == len(hist["test"]) == 8 == res["epochs"]
    assert hist["train"][-1] < hist["train"][0] / 2 and hist["test"][-1] < hist["test"][0]
    np.testing.assert_array_equal(res["pred"], res["pred_restored"])
    assert "predictions are identical" in out and os.path.getsize(res["checkpoint"]) > 0
    if res["png"] is None:
        assert "plot: skipped" in out
    else:
        with open(res["png"], "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["linear_regression", "train_mlp", "cnn_digits",
                                  "transformer_block", "custom_function", "workflow"])
def test_examples_have_help_and_main(example, name, capsys):
    mod = example(name)
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0 and "usage:" in capsys.readouterr().out
