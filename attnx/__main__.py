"""Command line: `python -m attnx` (a short demo) and the train / predict / bench commands.

  python -m attnx [--plot FILE.png] [demo options]
  python -m attnx train DATA.npz -o MODEL.safetensors [model and training options]
  mpiexec -n P python -m attnx train DATA.npz -o MODEL.safetensors --distributed [...]
  python -m attnx predict MODEL.safetensors DATA.npz -o OUT.npz
  python -m attnx forecast DATA.csv --horizon H --time-col DATE --target Y [--id-col ID]
  python -m attnx bench [benchmarks/run.py options]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, NoReturn, Sequence

import numpy as np

from .forecasting import _cli_forecast

if TYPE_CHECKING:
    from mpi4py import MPI

    from .runtime._typing import AnyArray
    from .estimators.regressors import AttentionRegressor

DEMO = dict(samples=4096, test_samples=1024, seq_len=10, d_model=8, n_heads=2, epochs=200,
            batch_size=32, lr=0.01, seed=0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"] and argv[1:] not in (["-h"], ["--help"]):
        # everything after `bench` belongs to benchmarks/run.py, options included
        # (argparse's REMAINDER would reject a leading --option)
        return _bench(argparse.Namespace(command="bench", args=argv[1:]))
    args = parser.parse_args(argv)
    comm = None
    try:
        if args.command is None:
            return _demo(args)
        if getattr(args, "distributed", False):
            comm = _world()
        run: Callable[..., int] = args.run
        return run(args) if comm is None else run(args, comm)
    except Exception as exc:
        # bad input and files (ValueError, TypeError, OSError), a missing optional
        # package, a diverged fit, or an error every rank of a --distributed run
        # raises alike (attnx.distributed): a one-line message, from rank 0. Any other
        # exception is a bug or a machine limit: its traceback is shown (below).
        if not (isinstance(exc, _REPORTED) or getattr(exc, "_attnx_agreed", False)):
            _abort_others(comm)
            raise
        if comm is None or comm.Get_rank() == 0:
            name = "attnx" + (f" {args.command}" if args.command else "")
            print(f"{name}: error: {' '.join(str(exc).split())}", file=sys.stderr)  # one line
        return 1
    except BaseException:
        _abort_others(comm)
        raise


# errors reported in one line (see main)
_REPORTED = (ValueError, TypeError, OSError, ImportError, ArithmeticError)


def _abort_others(comm: MPI.Intracomm | None) -> None:
    """With --distributed: an error the ranks did not agree on may leave the others
    waiting in a collective for this rank forever, so end the whole job."""
    if comm is not None and comm.Get_size() > 1:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


def _world() -> MPI.Intracomm:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError("--distributed needs mpi4py and an MPI library: "
                          "pip install 'attnx[mpi]', then start with mpiexec -n P") from exc
    return MPI.COMM_WORLD


# ---- argument parsing ------------------------------------------------------
class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one to show: not for required options, flags
    (their default is "off"), or options whose default None means "chosen" (their help
    says how)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if (action.required or action.nargs == 0 or action.default is None
                or not action.option_strings):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes in one line, with where to look (argparse prints the usage too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the "
                     f"options)\n")


def _parser() -> argparse.ArgumentParser:
    prog = "python -m attnx" if sys.argv[0].endswith("__main__.py") else "attnx"
    fmt = _Formatter
    p = _Parser(
        prog=prog, formatter_class=fmt,
        description="attnx: attention and small transformers trained on the CPU. Without a "
                    "command, trains a MultiHeadAttention model on a synthetic task (copy "
                    "the row whose feature 0 is largest to every position) and prints the "
                    "loss every few epochs, then per output feature the R^2, the MAE and "
                    "three test predictions against their targets.",
        epilog="Commands: train, predict, forecast, bench; `%(prog)s COMMAND --help` "
               "explains each.")
    demo = p.add_argument_group("demo options (no command)")
    demo.add_argument("--plot", metavar="FILE.png",
                      help="after training, save an attention heatmap (test sample 0, head 0) "
                           "to this PNG file (needs matplotlib)")
    demo.add_argument("--samples", type=int, default=DEMO["samples"],
                      help="training samples")
    demo.add_argument("--test-samples", type=int, default=DEMO["test_samples"],
                      help="held-out samples the scores are computed on")
    demo.add_argument("--seq-len", type=int, default=DEMO["seq_len"], help="positions per sample")
    demo.add_argument("--d-model", type=int, default=DEMO["d_model"], help="features per position")
    demo.add_argument("--n-heads", type=int, default=DEMO["n_heads"], help="attention heads")
    demo.add_argument("--epochs", type=int, default=DEMO["epochs"], help="training epochs")
    demo.add_argument("--batch-size", type=int, default=DEMO["batch_size"],
                      help="samples per AdamW step")
    demo.add_argument("--lr", type=float, default=DEMO["lr"], help="AdamW learning rate")
    demo.add_argument("--seed", type=int, default=DEMO["seed"],
                      help="seed of the data, the weights and the shuffling")
    p.set_defaults(command=None)
    sub = p.add_subparsers(title="commands", metavar="COMMAND")

    t = sub.add_parser("train", formatter_class=fmt,
                       help="train a model on X, Y from an .npz file and save it",
                       description="Train an AttentionRegressor or TransformerRegressor on the "
                                   "arrays X and Y (n_samples, seq_len, d) of an .npz file and "
                                   "write the model file (configuration, weights, optimizer "
                                   "state) that `predict` and attnx.load read.")
    t.add_argument("data", help=".npz file holding X and Y (see --x-key, --y-key)")
    t.add_argument("-o", "--output", default="model.safetensors",
                   help="model file to write (safetensors)")
    t.add_argument("--x-key", default="X", help="name of the input array in DATA")
    t.add_argument("--y-key", default="Y", help="name of the target array in DATA")
    t.add_argument("--model", choices=("attention", "transformer"), default="attention",
                   help="one MultiHeadAttention layer, or a Transformer")
    t.add_argument("--n-heads", type=int, default=1, help="attention heads (must divide d)")
    t.add_argument("--n-layers", type=int, default=2, help="transformer layers (transformer only)")
    t.add_argument("--d-hidden", type=int, default=None,
                   help="MLP width (transformer only; default 4 d)")
    t.add_argument("--causal", action="store_true", help="position i attends to j <= i only")
    t.add_argument("--rope", action="store_true",
                   help="rotary position embedding on queries and keys (needs an even d / n_heads)")
    t.add_argument("--no-bias", dest="bias", action="store_false",
                   help="no bias vectors (they are on by default)")
    t.add_argument("--epochs", type=int, default=100, help="passes over the data")
    t.add_argument("--batch-size", type=int, default=32, help="samples per AdamW step")
    t.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    t.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.999), metavar=("B1", "B2"),
                   help="AdamW moment decay rates")
    t.add_argument("--eps", type=float, default=1e-8, help="AdamW epsilon")
    t.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    t.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                   help="keep the sample order instead of reshuffling every epoch")
    t.add_argument("--validation-fraction", type=float, default=0.0,
                   help="part of the samples held out to compute a validation loss per epoch")
    t.add_argument("--early-stopping", action="store_true",
                   help="stop when the validation loss (or the training loss without "
                        "validation) has not improved by --tol for --n-iter-no-change epochs")
    t.add_argument("--n-iter-no-change", type=int, default=10,
                   help="epochs without improvement before early stopping")
    t.add_argument("--tol", type=float, default=1e-4, help="smallest improvement that counts")
    t.add_argument("--seed", type=int, default=0,
                   help="seed of the weights, the shuffling and the validation split")
    t.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="precision of the weights and the computation")
    t.add_argument("-v", "--verbose", action="store_true",
                   help="show a progress bar per epoch with the running loss (on stderr)")
    t.add_argument("--distributed", action="store_true",
                   help="data-parallel training over MPI: start with `mpiexec -n P`; each rank "
                        "reads DATA and trains on its 1/P of the samples (in order), each "
                        "rank shuffling its own part; rank 0 prints and writes the model "
                        "(needs attnx[mpi])")
    t.add_argument("--exact", action="store_true",
                   help="with --distributed: split the global batches of one process over "
                        "the ranks, so the result equals a single-process run with the same "
                        "batch size (slower: ranks pad to their largest share of a batch)")
    t.set_defaults(run=_train, command="train")

    pr = sub.add_parser("predict", formatter_class=fmt,
                        help="predict Y for the X of an .npz file with a saved model",
                        description="Load a model file written by `train` (or est.save), "
                                    "predict Y for the array X of an .npz file and write Y to "
                                    "an .npz file. When DATA also holds targets (--y-key), "
                                    "their R^2 is printed.")
    pr.add_argument("model", help="model file written by `train` or est.save")
    pr.add_argument("data", help=".npz file holding X (see --x-key)")
    pr.add_argument("-o", "--output", default="predictions.npz",
                    help=".npz file to write the predictions to (array Y)")
    pr.add_argument("--x-key", default="X", help="name of the input array in DATA")
    pr.add_argument("--y-key", default="Y",
                    help="name of the output array, and of the targets in DATA if present")
    pr.set_defaults(run=_predict, command="predict")

    _cli_forecast.add_parser(sub, fmt)

    b = sub.add_parser("bench", formatter_class=fmt,
                       help="run the benchmark suite (benchmarks/run.py of a source checkout)",
                       description="Run benchmarks/run.py of the attnx source checkout this "
                                   "attnx package was imported from (never one in the "
                                   "current directory); "
                                   "every further argument goes to it (`bench -- --help` "
                                   "shows its own help).")
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for benchmarks/run.py")
    b.set_defaults(run=_bench, command="bench")
    return p


# ---- demo ------------------------------------------------------------------
def _demo(args: argparse.Namespace) -> int:
    from .estimators.regressors import AttentionRegressor
    from .estimators._metrics import mae_per_output, r2_per_output
    from .datasets import max_position_task

    if args.plot:
        from .plot import _matplotlib

        _matplotlib()  # fail now, not after training
    X, Y = max_position_task(args.samples, args.seq_len, args.d_model, random_state=args.seed)
    Xte, Yte = max_position_task(args.test_samples, args.seq_len, args.d_model,
                                 random_state=args.seed + 1)
    est = AttentionRegressor(args.n_heads, batch_size=args.batch_size, lr=args.lr,
                             weight_decay=0.0, random_state=args.seed)
    print("attnx demo: one attention layer learns to find, in each sequence, the position "
          "whose feature 0 is largest and to copy that row to every output position")
    print(f"data: {args.samples} training and {args.test_samples} test samples, seq_len "
          f"{args.seq_len}, d_model {args.d_model}")
    every = max(1, args.epochs // 10)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        est.partial_fit(X, Y)  # one epoch; its loss is printed every few epochs
        if est.n_iter_ < epoch:  # Ctrl-C: partial_fit warned and kept the last step
            break
        if epoch == 1 or epoch % every == 0 or epoch == args.epochs:
            print(f"epoch {epoch:4d}  loss {est.loss_curve_[-1]:.6f}", flush=True)
    seconds = time.perf_counter() - start
    print(f"model: {est.model_!r}, {est.model_.params.flat.size} parameters; "
          f"trained {est.n_iter_} epochs in {seconds:.1f} s")

    P = np.asarray(est.predict(Xte))  # dense X: one (n, T, d) array
    r2, mae = r2_per_output(Yte, P), mae_per_output(Yte, P)
    print(f"\ntest set ({args.test_samples} samples x {args.seq_len} positions), "
          f"three sample predictions at position 0 (prediction / target):")
    print("feature     R^2      MAE   samples 0, 1, 2")
    for j in range(args.d_model):
        pairs = "   ".join(f"{P[i, 0, j]:+.3f} / {Yte[i, 0, j]:+.3f}"
                           for i in range(min(3, args.test_samples)))
        print(f"{j:7d}  {r2[j]:.4f}  {mae[j]:.4f}   {pairs}")
    print(f"mean     {r2.mean():.4f}  {mae.mean():.4f}")
    if args.plot:
        _save_heatmap(est, Xte, args.plot)
        print(f"wrote attention heatmap (test sample 0, head 0) to {args.plot}")
    return 0


def _save_heatmap(est: AttentionRegressor, X: AnyArray, path: str) -> None:
    from matplotlib.figure import Figure

    from .plot import attention_heatmap

    fig = Figure(figsize=(5.5, 4.5))  # no pyplot: no GUI backend needed
    attention_heatmap(est, X=X, sample=0, head=0, ax=fig.add_subplot())
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# ---- train / predict -------------------------------------------------------
def _load_arrays(path: str, keys: Sequence[str], optional: Sequence[str] = ()
                 ) -> tuple[list[AnyArray], list[AnyArray | None]]:
    """The arrays `keys` of the .npz file at path, and those of `optional` (None when
    absent); ValueError when the file cannot be read or a required array is missing."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise ValueError(f"{path} holds one array, not an .npz archive")
            missing = [k for k in keys if k not in data.files]
            if missing:
                raise ValueError(f"{path} has no array {missing[0]!r} (it holds "
                                 f"{', '.join(data.files) or 'nothing'})")
            return ([data[k] for k in keys],
                    [data[k] if k in data.files else None for k in optional])
    except (OSError, EOFError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc


def _train(args: argparse.Namespace, comm: MPI.Intracomm | None = None) -> int:
    from . import distributed
    from .estimators.regressors import AttentionRegressor, TransformerRegressor

    dist = distributed.wrap(comm)
    with dist.together():  # a rank that cannot read the file stops every rank
        (X, Y), _ = _load_arrays(args.data, (args.x_key, args.y_key))
        if comm is not None:
            if X.ndim < 1 or Y.ndim < 1 or X.shape[0] != Y.shape[0]:
                raise ValueError(f"X and Y of {args.data} must have one first dimension, "
                                 f"got {X.shape} and {Y.shape}")
            if X.shape[0] < dist.size:
                raise ValueError(f"{args.data} holds {X.shape[0]} samples, fewer than the "
                                 f"{dist.size} ranks")
            part = distributed.shard(X.shape[0], dist.rank, dist.size)
            X, Y = X[part], Y[part]  # this rank's samples; the rest is freed
    dist.setup(X.shape[0])
    options = dict(causal=args.causal, bias=args.bias, betas=tuple(args.betas), eps=args.eps,
                   shuffle=args.shuffle, validation_fraction=args.validation_fraction,
                   early_stopping=args.early_stopping, n_iter_no_change=args.n_iter_no_change,
                   tol=args.tol, distributed="exact" if args.exact else "balanced")
    common = dict(positional="rope" if args.rope else "none", epochs=args.epochs,
                  batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
                  random_state=args.seed, verbose=int(args.verbose),
                  dtype=np.dtype(args.dtype).type)
    est: AttentionRegressor | TransformerRegressor
    if args.model == "transformer":
        # the bare X -> Y transformer, as the command always trained
        est = TransformerRegressor(args.n_heads, args.n_layers, args.d_hidden, **common,
                                   d_model=None, norm=None, dropout=0.0, patch_len=1,
                                   instance_norm=None,
                                   options={**options, "lr_schedule": "constant",
                                            "max_grad_norm": None, "decay": "all",
                                            "standardize": False})
    else:
        est = AttentionRegressor(args.n_heads, **common, options=options)
    start = time.perf_counter()
    est.fit(X, Y, comm=comm)
    seconds = time.perf_counter() - start
    shape = (dist.n,) + X.shape[1:]  # every rank's samples with --distributed
    ranks = f" over {dist.size} MPI ranks" if comm is not None else ""
    line = f"trained {est!r} on X {shape}{ranks}: {est.n_iter_} epochs in {seconds:.1f} s"
    if est.loss_curve_:  # empty when Ctrl-C came during the first epoch
        line += f", final loss {est.loss_curve_[-1]:.6g}"
    if getattr(est, "validation_loss_curve_", None):
        line += f", best validation loss {est.best_validation_loss_:.6g}"
    r2 = distributed.global_r2(comm, Y, est.predict(X))  # from every rank's samples
    if dist.is_root:  # the ranks hold identical models: one prints and writes
        print(line)
        print(f"R^2 on the training data: {r2:.4f}")
        est.save(args.output)
        print(f"wrote {args.output}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from .io import load
    from .estimators._metrics import r2_score

    est = load(args.model)
    (X,), (Y_true,) = _load_arrays(args.data, (args.x_key,), optional=(args.y_key,))
    Y = est.predict(X)
    with open(args.output, "wb") as f:  # np.savez(name) would append .npz to the name
        np.savez(f, **{args.y_key: Y})
    print(f"wrote {args.output}: {args.y_key} {Y.shape} {Y.dtype}")
    if Y_true is not None and Y_true.shape == Y.shape:
        print(f"R^2 against {args.y_key} of {args.data}: {r2_score(Y_true, Y):.4f}")
    return 0


# ---- bench -----------------------------------------------------------------
def find_bench_script(roots: Iterable[str | os.PathLike[str]] | None = None) -> Path | None:
    """benchmarks/run.py of the attnx source checkout this package was imported from, or None.

    Only the checkout that holds this very package counts (its pyproject.toml names
    the attnx project and its attnx/ folder is this one): never the current
    directory, so `attnx bench` cannot run a script planted where the user stands,
    and never a site-packages folder an installed wheel happens to sit in.
    """
    here = Path(__file__).resolve().parent
    if roots is None:
        roots = [here.parent]
    for root in map(Path, roots):
        script = root / "benchmarks" / "run.py"
        if script.is_file() and _is_attnx_checkout(root, here):
            return script
    return None


def _is_attnx_checkout(root: Path, package_dir: Path) -> bool:
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
        same = (root / "attnx").resolve() == package_dir
    except OSError:
        return False
    return same and re.search(r'^name\s*=\s*"attnx"\s*$', project, re.M) is not None


def _bench(args: argparse.Namespace) -> int:
    script = find_bench_script()
    if script is None:
        print("attnx bench: the benchmark suite (benchmarks/run.py) lives in the attnx source "
              "checkout, not in the installed package; install attnx from a checkout in "
              "editable mode (pip install -e .) or run `python benchmarks/run.py` in the "
              "checkout", file=sys.stderr)
        return 2
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    return subprocess.call([sys.executable, os.fspath(script), *rest])


if __name__ == "__main__":
    sys.exit(main())
