"""benchmarks/threads.py: the table is computed from what each run measured (fake runs
here: no timings are taken), every case's script is valid Python that prints one
SECONDS line, and the environment of a run carries only the setting's thread vars."""
import ast
import json
from pathlib import Path

from bench_scripts import load_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
threads_bench = load_script("attnx_bench_threads", BENCH / "threads.py")


def test_case_scripts_parse_and_report_seconds():
    for name, code in threads_bench.CASES.items():
        ast.parse(code)
        assert code.count('print("SECONDS"') == 1, name


def test_env_drops_the_callers_thread_variables(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    env = threads_bench._env({})
    assert "OMP_NUM_THREADS" not in env and "OPENBLAS_NUM_THREADS" not in env
    assert threads_bench._env({"OMP_NUM_THREADS": "1"})["OMP_NUM_THREADS"] == "1"


def test_table_from_fake_runs(tmp_path, monkeypatch):
    runs = []

    def fake(case, extra, folder, co2):
        runs.append((case, dict(extra)))
        base = {"digits": 1.0, "gridsearch": 4.0}[case]
        # the second setting of each case takes half (gridsearch) or 1.5x (digits)
        compared = extra in ({}, {"BENCH_N_JOBS": "2"})
        return base * ((0.5 if case == "gridsearch" else 1.5) if compared else 1.0) \
            + 0.01 * len(runs)

    class NoBusy:
        def __init__(self, n):
            self.n = n

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(threads_bench, "run_case", fake)
    monkeypatch.setattr(threads_bench, "Busy", NoBusy)
    monkeypatch.setattr(threads_bench, "machine", lambda: {
        "cpu": "test CPU", "cores": 2, "simd_level": "portable", "pools": [],
        "OPENBLAS_CORETYPE": "unset", "python": "3"})
    out = tmp_path / "t"
    assert threads_bench.main(["--cases", "digits,gridsearch", "--states", "quiet,busy",
                               "--rounds", "3", "--out", str(out)]) == 0
    assert len(runs) == 3 * 2 * 2 * 2
    data = json.loads((tmp_path / "t.json").read_text())
    rows = {(r["case"], r["state"]): r for r in data["rows"]}
    assert set(rows) == {("digits", "quiet"), ("digits", "busy"), ("gridsearch", "quiet"),
                         ("gridsearch", "busy")}
    for r in rows.values():
        a = sorted(r["baseline_seconds"])[1]
        b = sorted(r["compared_seconds"])[1]
        assert abs(r["ratio_of_medians"] - b / a) < 1e-12
    assert rows["digits", "quiet"]["baseline"] == "1 thread"
    assert rows["gridsearch", "busy"]["compared"] == "n_jobs=2"
    text = (tmp_path / "t.txt").read_text()
    assert "test CPU" in text and "| gridsearch | busy | n_jobs=1 |" in text
