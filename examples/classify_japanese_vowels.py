"""Sequence classification on real data: who is speaking? (JapaneseVowels)

Nine speakers uttered the Japanese vowels "ae"; each utterance is a series of 12
LPC cepstrum coefficients, 7 to 29 frames long (ragged). 270 training and 370 test
utterances, from the UCI archive, as shipped inside the `sktime` wheel
(pip install "attnx[examples]", and torch's CPU build for the PyTorch twin); the
files are read directly, without importing sktime.

Prints the test accuracy and fit time of
  - attnx.TransformerClassifier on the ragged list of sequences,
  - a baseline: logistic regression on each utterance's per-coefficient mean and std,
  - the same network trained in PyTorch (same initial weights, hyper-parameters, epochs;
    skipped with a note when torch is not installed).
Everything runs on one thread.
"""
import numpy as np

from _common import (TORCH_NOTE, have_torch, initial_model, load_japanese_vowels, one_thread,
                     timed, torch_twin_fit)

import attnx


def main():
    limits = one_thread()
    X, y = load_japanese_vowels("TRAIN")
    Xt, yt = load_japanese_vowels("TEST")
    # standardise each coefficient with the training frames' mean and std
    frames = np.concatenate(X)
    mu, sd = frames.mean(axis=0), frames.std(axis=0)
    X = [((x - mu) / sd).astype(np.float32) for x in X]
    Xt = [((x - mu) / sd).astype(np.float32) for x in Xt]
    lengths = [len(x) for x in X + Xt]
    print(f"JapaneseVowels: {len(X)} train / {len(Xt)} test sequences, 12 features, "
          f"lengths {min(lengths)}-{max(lengths)}, {len(set(y))} classes")

    hp = dict(n_heads=4, n_layers=2, d_model=32, norm="pre", positional="sinusoidal",
              pooling="mean", epochs=40, batch_size=16, lr=2e-3, weight_decay=0.01,
              n_iter_no_change=40, random_state=0,  # all epochs, as the twin
              # the twin trains with plain AdamW on these inputs: the same here
              dropout=0.0, lr_schedule="constant", max_grad_norm=None, decay="all",
              standardize=False, patch_len=1)
    est = attnx.TransformerClassifier(**hp)
    _, t_attnx = timed(est.fit, X, y)
    acc_attnx = est.score(Xt, yt)

    from sklearn.linear_model import LogisticRegression

    def summary(seqs):
        return np.array([np.concatenate([s.mean(axis=0), s.std(axis=0)]) for s in seqs])

    base = LogisticRegression(max_iter=2000)
    _, t_base = timed(base.fit, summary(X), y)
    acc_base = base.score(summary(Xt), yt)

    twin = None
    if have_torch():
        codes = np.searchsorted(est.classes_, y)
        init = initial_model(est, X, y)
        predict, t_torch = timed(torch_twin_fit, init, X, codes, task="classify",
                                 epochs=hp["epochs"], batch_size=hp["batch_size"], lr=hp["lr"],
                                 weight_decay=hp["weight_decay"], seed=0)
        twin = (float(np.mean(est.classes_[np.argmax(predict(Xt), axis=1)] == yt)), t_torch)
    limits.restore_original_limits()

    print(f"{'model':<44} {'test accuracy':>13} {'fit time':>9}")
    print(f"{'attnx TransformerClassifier (2 x 32 wide)':<44} {acc_attnx:>13.3f} {t_attnx:>8.1f}s")
    if twin is not None:
        print(f"{'PyTorch, same network and training':<44} {twin[0]:>13.3f} {twin[1]:>8.1f}s")
    print(f"{'baseline: logistic regression on mean, std':<44} {acc_base:>13.3f} {t_base:>8.1f}s")
    if twin is None:
        print(TORCH_NOTE)


if __name__ == "__main__":
    main()
