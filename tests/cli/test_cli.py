"""python -m attnx: the demo, train / predict / bench, run as subprocesses outside the checkout."""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import attnx
from attnx import __main__ as cli
from attnx.datasets import max_position_task


def run(args, cwd, check=True):
    r = subprocess.run([sys.executable, "-m", "attnx", *args], cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_demo_prints_a_falling_loss_and_per_feature_scores(tmp_path):
    pytest.importorskip("matplotlib")
    r = run(["--samples", "512", "--test-samples", "64", "--seq-len", "6", "--d-model", "4",
             "--epochs", "20", "--plot", "heat.png"], tmp_path)
    out = r.stdout
    losses = [float(m) for m in re.findall(r"^epoch +\d+ +loss ([0-9.]+)$", out, re.M)]
    epochs = [int(m) for m in re.findall(r"^epoch +(\d+) ", out, re.M)]
    assert epochs == [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert losses[-1] < 0.3 * losses[0]
    rows = re.findall(r"^ +(\d) +(-?[0-9.]+) +([0-9.]+) +(.*)$", out, re.M)
    assert [int(r_[0]) for r_ in rows] == [0, 1, 2, 3]           # one line per output feature
    for _, r2, mae, pairs in rows:
        assert 0.5 < float(r2) <= 1.0 and 0 <= float(mae) < 0.5
        assert len(re.findall(r"[+-][0-9.]+ / [+-][0-9.]+", pairs)) == 3
    assert re.search(r"^mean +0\.\d{4} +0\.\d{4}$", out, re.M)
    assert "wrote attention heatmap" in out
    assert (tmp_path / "heat.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.stderr == ""


@pytest.mark.parametrize("model_args", [
    ["--n-heads", "2"],
    ["--model", "transformer", "--n-layers", "1", "--d-hidden", "8", "--causal", "--rope",
     "--no-bias", "--dtype", "float64", "--validation-fraction", "0.25"],
])
def test_train_then_predict(tmp_path, model_args):
    X, Y = max_position_task(64, 5, 4, random_state=0)
    np.savez(tmp_path / "data.npz", X=X, Y=Y)
    r = run(["train", "data.npz", "-o", "m.npz", "--epochs", "3", "--lr", "0.01",
             "--batch-size", "16", "--seed", "3", *model_args], tmp_path)
    assert "3 epochs" in r.stdout and "wrote m.npz" in r.stdout
    assert re.search(r"R\^2 on the training data: -?[0-9.]+", r.stdout)
    est = attnx.load(tmp_path / "m.npz")
    assert est.n_iter_ == 3 and est.batch_size == 16 and est.random_state == 3
    if "--model" in model_args:
        assert isinstance(est, attnx.TransformerRegressor)
        assert est.model_.causal and est.model_.rope and not est.model_.bias
        assert est.model_.dtype == np.float64 and len(est.validation_loss_curve_) == 3
        assert "best validation loss" in r.stdout
    else:
        assert isinstance(est, attnx.AttentionRegressor) and est.model_.n_heads == 2

    r = run(["predict", "m.npz", "data.npz", "-o", "out.npz"], tmp_path)
    assert "wrote out.npz: Y (64, 5, 4)" in r.stdout and "R^2 against Y" in r.stdout
    with np.load(tmp_path / "out.npz") as f:   # the saved model predicts what it did
        np.testing.assert_array_equal(f["Y"], est.predict(X))


def test_cli_errors_are_short_messages(tmp_path):
    r = run(["train", "nothere.npz"], tmp_path, check=False)
    assert r.returncode == 1 and "attnx train: error:" in r.stderr and "nothere.npz" in r.stderr
    assert "Traceback" not in r.stderr
    np.savez(tmp_path / "d.npz", A=np.zeros((2, 3, 4)))
    r = run(["train", "d.npz"], tmp_path, check=False)
    assert r.returncode == 1 and "has no array 'X'" in r.stderr
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    r = run(["predict", "bad.npz", "d.npz"], tmp_path, check=False)
    assert r.returncode == 1 and "bad.npz is not an attnx model file" in r.stderr
    r = run(["train", "d.npz", "--model", "lstm"], tmp_path, check=False)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_help_explains_every_option(tmp_path):
    for cmd in ([], ["train"], ["predict"], ["forecast"], ["bench"]):
        r = run([*cmd, "--help"], tmp_path)
        assert r.stdout.startswith("usage: python -m attnx")
    parser = cli._parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == {"train", "predict", "forecast", "bench"}
    for p in [parser, *subs.choices.values()]:
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and len(action.help) > 10, (p.prog, action.dest)
            for flag in action.option_strings:
                assert flag in p.format_help()


def _fake_checkout(root, package_dir):
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "run.py").write_text("import sys\nprint('BENCH', sys.argv[1:])\n")
    (root / "pyproject.toml").write_text('[project]\nname = "attnx"\n')
    (root / "attnx").symlink_to(package_dir, target_is_directory=True)


def test_bench_runs_only_the_suite_of_the_package_checkout(tmp_path, monkeypatch):
    package_dir = os.path.dirname(os.path.realpath(cli.__file__))
    # a checkout whose attnx/ is this very package: its suite is found
    _fake_checkout(tmp_path / "checkout", package_dir)
    assert cli.find_bench_script([tmp_path / "checkout"]) == \
        tmp_path / "checkout" / "benchmarks" / "run.py"
    # benchmarks/run.py beside another attnx folder, or without the project file: refused
    other = tmp_path / "other"
    (other / "benchmarks").mkdir(parents=True)
    (other / "benchmarks" / "run.py").write_text("")
    (other / "pyproject.toml").write_text('[project]\nname = "attnx"\n')
    (other / "attnx").mkdir()
    assert cli.find_bench_script([other]) is None
    (tmp_path / "checkout" / "pyproject.toml").write_text('[project]\nname = "evil"\n')
    assert cli.find_bench_script([tmp_path / "checkout"]) is None


def test_bench_never_runs_a_script_from_the_current_directory(tmp_path):
    planted = tmp_path / "benchmarks"
    planted.mkdir()
    (planted / "run.py").write_text("import sys\nprint('PLANTED')\nsys.exit(3)\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "attnx"\n')
    r = run(["bench", "--", "--help"], tmp_path, check=False)
    assert "PLANTED" not in r.stdout and r.returncode != 3


def test_bench_passes_the_remaining_arguments(monkeypatch, tmp_path):
    script = tmp_path / "run.py"
    calls = []
    monkeypatch.setattr(cli, "find_bench_script", lambda roots=None: script)
    monkeypatch.setattr(cli.subprocess, "call", lambda argv: calls.append(argv) or 3)
    assert cli.main(["bench", "--quick", "--threads", "1"]) == 3
    assert cli.main(["bench", "--", "--help"]) == 3
    assert calls == [[sys.executable, os.fspath(script), "--quick", "--threads", "1"],
                     [sys.executable, os.fspath(script), "--help"]]


def test_bench_without_a_checkout_says_where_the_suite_lives(tmp_path, monkeypatch, capsys):
    assert cli.find_bench_script([tmp_path]) is None
    monkeypatch.setattr(cli, "find_bench_script", lambda roots=None: None)
    assert cli.main(["bench", "--quick"]) == 2
    assert "lives in the attnx source checkout" in capsys.readouterr().err


def test_main_is_importable_and_returns_a_status(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    X, Y = max_position_task(32, 4, 4, random_state=0)
    np.savez("d.npz", X=X, Y=Y)
    assert cli.main(["train", "d.npz", "-o", "m.npz", "--epochs", "1"]) == 0
    assert os.path.exists("m.npz")
    assert cli.main(["predict", "m.npz", "d.npz", "--y-key", "P"]) == 0
    with np.load("predictions.npz") as f:
        assert f["P"].shape == (32, 4, 4)
    assert "wrote predictions.npz" in capsys.readouterr().out


def test_plot_without_matplotlib_fails_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["--plot", "h.png", "--samples", "8", "--epochs", "1"]) == 1
    out = capsys.readouterr()
    assert "pip install attnx[plot]" in out.err and "epoch" not in out.out
    assert not os.path.exists("h.png")


def test_a_bug_keeps_its_traceback_and_bad_input_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    X, Y = max_position_task(8, 4, 4, random_state=0)
    np.savez("d.npz", X=X, Y=Y)

    def buggy(self, *a, **k):
        raise KeyError("an attnx bug")

    monkeypatch.setattr(attnx.AttentionRegressor, "fit", buggy)
    with pytest.raises(KeyError, match="an attnx bug"):
        cli.main(["train", "d.npz", "-o", "m.npz", "--epochs", "1"])
    for exc in (MemoryError("too big"), RuntimeError("a bug")):
        def failing(self, *a, exc=exc, **k):
            raise exc
        monkeypatch.setattr(attnx.AttentionRegressor, "fit", failing)
        with pytest.raises(type(exc)):
            cli.main(["train", "d.npz", "-o", "m.npz", "--epochs", "1"])

    def bad(self, *a, **k):
        raise ValueError("lr must be > 0")

    monkeypatch.setattr(attnx.AttentionRegressor, "fit", bad)
    assert cli.main(["train", "d.npz", "-o", "m.npz", "--epochs", "1"]) == 1
    assert "attnx train: error: lr must be > 0" in capsys.readouterr().err
