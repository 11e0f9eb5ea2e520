"""How long the forecaster's network trains when epochs is None: the default number of
epochs from the optimizer-step budget ``steps`` and the batches per epoch."""
from __future__ import annotations

__all__ = ["default_epochs", "MIN_EPOCHS", "MAX_EPOCHS", "FLOOR_BUDGET"]

#: the epochs are clipped to [MIN_EPOCHS, MAX_EPOCHS]
MIN_EPOCHS = 20
MAX_EPOCHS = 300
#: the floor of MIN_EPOCHS costs at most FLOOR_BUDGET * steps optimizer steps
FLOOR_BUDGET = 2


def default_epochs(steps: int, per_epoch: int) -> int:
    """Epochs that train for about `steps` optimizer steps of `per_epoch` batches each:
    round(steps / per_epoch), clipped to [MIN_EPOCHS, MAX_EPOCHS].

    The floor gives a few windows (one short series) several passes, but over a panel
    of many windows it would make the training grow with the panel (20 passes over
    50,000 windows are 30,000 steps in batches of 32). So the floor costs at most
    FLOOR_BUDGET * steps steps: past 2 * steps / 20 batches per epoch it falls to
    round(FLOOR_BUDGET * steps / per_epoch) epochs, at least 1; below that point the
    rule is the plain clip.

        epochs = clip(round(steps / p), min(20, max(1, round(2 * steps / p))), 300)
    """
    if steps < 1 or per_epoch < 1:
        raise ValueError(f"steps and per_epoch must be >= 1, got {steps} and {per_epoch}")
    floor = min(MIN_EPOCHS, max(1, round(FLOOR_BUDGET * steps / per_epoch)))
    return int(min(max(round(steps / per_epoch), floor), MAX_EPOCHS))
