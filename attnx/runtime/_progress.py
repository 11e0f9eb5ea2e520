"""Progress bars of training (verbose >= 1): one tqdm bar per phase.

A fit's bar runs over all its optimizer steps, named for its phase ("fit"; a
forecaster names its "held-out run", trained in several warm-started fits that share
one bar, and its "final fit"), with the epoch and the running loss in its postfix.
tqdm is imported only when a bar is shown.
"""
from __future__ import annotations

import contextvars
import sys
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    class _Bar(Protocol):
        """What attnx uses of a tqdm progress bar."""

        def set_postfix_str(self, s: str = ..., refresh: bool = ...) -> object: ...
        def update(self, n: int = ...) -> object: ...
        def refresh(self) -> object: ...
        def close(self) -> None: ...

        total: float | None


class progress_phase:
    """Context manager: the fits inside it share one progress bar named `name` (a
    forecaster's "held-out run", trained in several warm-started fits, and its "final
    fit"); outside, each fit has a bar of its own named "fit"."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bar: _Bar | None = None    # made by the first fit that shows one
        self._token: contextvars.Token[progress_phase | None] | None = None

    def __enter__(self) -> progress_phase:
        self._token = _phase.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _phase.reset(self._token)
        if self.bar is not None:
            self.bar.close()
            self.bar = None


_phase: contextvars.ContextVar[progress_phase | None] = contextvars.ContextVar(
    "attnx_phase", default=None)


def phase_name(default: str) -> str:
    """The enclosing progress_phase's name, else default."""
    phase = _phase.get()
    return phase.name if phase is not None else default


class Progress:
    """verbose >= 1: one tqdm bar per phase (a fit, a forecaster's held-out run or its
    final fit) over all its optimizer steps, named for the phase, showing the epoch
    and the running loss; the last epoch's loss stays on the bar when it ends."""

    def __init__(self, verbose: int, n_batches: int, last_epoch: int | None = None,
                 phase: str = "fit", epochs: int | None = None,
                 first_epoch: int = 1) -> None:
        self.on = verbose >= 1
        self.n_batches = n_batches
        self.last_epoch = last_epoch
        self.phase = phase
        self.total = n_batches * (epochs if epochs is not None else 1)
        self.bar: _Bar | None = None
        self.epoch = first_epoch
        if self.on:
            from tqdm import tqdm  # imported only when asked to print
            self._tqdm: Callable[..., _Bar] = tqdm

    def _label(self) -> str:
        total = f"/{self.last_epoch}" if self.last_epoch else ""
        return f"epoch {self.epoch}{total}"

    def start(self, epoch: int) -> None:
        self.epoch = epoch
        if not self.on or self.bar is not None:
            return
        shared = _phase.get()
        if shared is not None and shared.bar is not None:   # the phase's bar, extended
            self.bar = shared.bar
            self.bar.total = (self.bar.total or 0) + self.total
            self.bar.refresh()
            return
        self.bar = self._tqdm(total=self.total, desc=self.phase, unit="step",
                              leave=True, file=sys.stderr)
        if shared is not None:
            shared.bar = self.bar

    def step(self, running_loss: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self._label()}, loss={running_loss:.4g}",
                                     refresh=False)
            self.bar.update(1)

    def end(self, loss: float, val_loss: float | None = None, note: str = "") -> None:
        if self.bar is not None:
            text = f"{self._label()}, loss={loss:.4g}"
            if val_loss is not None:
                text += f", val_loss={val_loss:.4g}"
            self.bar.set_postfix_str(text + note, refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            shared = _phase.get()
            if shared is None or shared.bar is not self.bar:   # a phase closes its own
                self.bar.close()
            self.bar = None
