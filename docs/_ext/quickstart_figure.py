"""Run the landing page's quick start (the code block named "quickstart" in
docs/index.rst, as written there) and save the figure it draws as
docs/_static/quickstart_forecast.png, the image the landing page shows.

    python docs/_ext/quickstart_figure.py      # needs attnx built, statsmodels, matplotlib

It prints what the quick start prints. tests/docs/test_docs_quickstart.py runs the same block.
"""
import os
import re
import sys

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(DOCS, "_static", "quickstart_forecast.png")


def quickstart_code(path=os.path.join(DOCS, "index.rst")):
    """The source of the code block with ``:name: quickstart`` in `path`."""
    text = open(path).read()
    m = re.search(r"^\.\. code-block:: python\n   :name: quickstart\n\n((?:   .*\n|\n)+)",
                  text, re.M)
    if m is None:
        raise ValueError(f"{path}: no '.. code-block:: python' with ':name: quickstart'")
    return "\n".join(line[3:] for line in m.group(1).splitlines()).strip() + "\n"


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    exec(compile(quickstart_code(), "docs/index.rst (quickstart)", "exec"), {"__name__": "qs"})
    fig = plt.gcf()
    fig.set_size_inches(8, 3.2)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
