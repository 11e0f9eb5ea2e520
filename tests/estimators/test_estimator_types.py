"""Types of the estimator API as a user's type checker sees them: fit and partial_fit
return the estimator's own class, predict / score / predict_proba have precise result
types, array-likes and ragged lists are accepted, and misspelt choices of positional,
pooling and class_weight are type errors. Runs mypy --strict on a user-side snippet
(errors inside attnx itself are the whole-package mypy check's business)."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

USER_CODE = '''
from __future__ import annotations

import numpy as np
from typing_extensions import assert_type

from attnx import (AttentionClassifier, AttentionRegressor, TransformerClassifier,
                   TransformerRegressor)
from attnx.runtime._typing import AnyArray, FloatArray

X = np.zeros((4, 3, 2))
y = np.zeros(4)
labels = np.array([0, 1, 0, 1])

reg = AttentionRegressor(2, positional="sinusoidal", norm="pre", dtype="float64").fit(X, y)
assert_type(reg, AttentionRegressor)
assert_type(reg.predict(X), "FloatArray | list[FloatArray]")
assert_type(reg.score(X, y, sample_weight=[1.0, 2.0, 1.0, 1.0]), float)
treg = TransformerRegressor(1, 2, 8, random_state=np.random.default_rng(0))
assert_type(treg.partial_fit([x for x in X], y), TransformerRegressor)
assert_type(treg.attention_weights(X), "FloatArray | list[FloatArray]")

clf = TransformerClassifier(1, 2, class_weight="balanced").partial_fit(X, labels, [0, 1])
assert_type(clf, TransformerClassifier)
assert_type(clf.predict(X), "AnyArray | list[AnyArray]")
assert_type(AttentionClassifier(class_weight={0: 2.0}).fit(X, labels).predict_proba(X),
            "FloatArray | list[FloatArray]")

# misspelt choices are type errors (strict mode reports an unused ignore otherwise)
AttentionRegressor(positional="learnt")  # type: ignore[arg-type]
AttentionRegressor(pooling="min")  # type: ignore[arg-type]
AttentionClassifier(class_weight="balance")  # type: ignore[arg-type]
'''


def test_user_code_using_the_estimators_type_checks(tmp_path):
    path = tmp_path / "user_code.py"
    path.write_text(textwrap.dedent(USER_CODE))
    env = dict(os.environ, MYPYPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--cache-dir=/dev/null", str(path)],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
