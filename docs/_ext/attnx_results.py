"""Sphinx directives that build the results pages from the files in benchmarks/results/.

Every number on those pages is read from a result file while the docs are built, so a
page cannot disagree with the file it cites. The directives:

``results-table FILE``
    One Markdown table of FILE (a .md written by benchmarks/accuracy.py,
    forecasting.py or by hand): ``:section:`` the ``##`` heading it sits under (prefix
    match; default: the whole file), ``:table:`` which table of that part (0-based),
    ``:columns:`` the header cells to keep, in that order, ``:rows:`` first cells to
    keep (prefix match), ``:join: OTHER.md`` with ``:join-columns:``: columns taken
    from the same section of another file, rows matched on their first cell,
    ``:best: min|max``: bold the best leading number of each row (other bold marks
    dropped), ``:mean-where: COLUMN=VALUE``: a last row with the mean of the leading
    number of every column over the rows where COLUMN is VALUE; ``:ratio: A / B``: a
    last column with column A's leading number over column B's; ``:headers:`` the
    names shown for the columns (after the join and the ratio).
``results-list FILE``
    The bullet list under ``:section:`` (e.g. a file's "Data" part).
``results-line FILE``
    The lines of FILE that match the regular expression ``:match:``, as a paragraph.
``results-commits FILE``
    The commits named under ``:section:`` (default "Rows merged"), as a sentence.
``results-speed FILE.json``
    A benchmarks/run.py race table: ``:dtype:``, optional ``:configs:`` (substrings)
    and ``:threads:``.
``results-run FILE.json``
    What a run.py file says about its run: commit, date, CPU, libraries, BLAS, limits.
``results-ceiling``
    benchmarks/ceiling.py's bound per race (ceiling.json, or ``:file:``), ``:threads:``.
``results-long-seq``, ``results-mpi``
    long_seq.json and mpi_epoch.json as tables.
``results-files``
    Every file in benchmarks/results/ with a download link.

Each table ends with a line naming the file it was read from.
"""
from __future__ import annotations

import json
import os
import re
from statistics import mean

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


# ------------------------------------------------------------------ reading files
def _path(name):
    path = os.path.normpath(os.path.join(RESULTS, name))
    if not path.startswith(RESULTS + os.sep) or not os.path.isfile(path):
        raise ValueError(f"benchmarks/results/{name} does not exist")
    return path


def _read(name):
    with open(_path(name), encoding="utf-8") as f:
        return f.read()


def _json(name):
    return json.loads(_read(name))


def _sections(text):
    """[(heading, lines)] of a Markdown file: '' for the part before the first '##'."""
    out = [("", [])]
    for line in text.splitlines():
        m = re.match(r"^(#{2,6})\s+(.*)$", line)
        if m:
            out.append((m.group(2).strip(), []))
        elif not line.startswith("# "):
            out[-1][1].append(line)
    return out


def _part(text, section):
    if not section:
        return text.splitlines()
    for heading, lines in _sections(text):
        if heading.startswith(section):
            return lines
    raise ValueError(f"no section starting with {section!r}")


def _split_row(line):
    cells = line.strip()
    if cells.startswith("|"):
        cells = cells[1:]
    if cells.endswith("|"):
        cells = cells[:-1]
    return [c.strip() for c in cells.split("|")]


def _tables(lines):
    """Every Markdown table in lines: (header, rows)."""
    tables, block = [], []
    for line in lines + [""]:
        if line.lstrip().startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2 and set(block[1].replace("|", "").strip()) <= set("-: "):
            header = _split_row(block[0])
            rows = [_split_row(b) for b in block[2:]]
            tables.append((header, [r + [""] * (len(header) - len(r)) for r in rows]))
        block = []
    return tables


def _leading_number(cell):
    m = NUMBER.search(cell.replace("**", ""))
    return float(m.group()) if m else None


def _fmt_like(value, cells):
    """value with as many decimals as the cells it summarises."""
    decimals = [len(m.group().split(".")[1]) if "." in m.group() else 0
                for c in cells for m in [NUMBER.search(c.replace("**", ""))] if m]
    return f"{value:.{max(decimals) if decimals else 3}f}"


# ------------------------------------------------------------------ building nodes
def _inline(text):
    """docutils nodes for a cell: **bold** and `code` spans, the rest plain text."""
    out = []
    for piece in re.split(r"(\*\*[^*]+\*\*|`[^`]+`)", text):
        if not piece:
            continue
        if piece.startswith("**") and piece.endswith("**") and len(piece) > 4:
            out.append(nodes.strong(text=piece[2:-2]))
        elif piece.startswith("`") and piece.endswith("`") and len(piece) > 2:
            out.append(nodes.literal(text=piece[1:-1]))
        else:
            out.append(nodes.Text(piece))
    return out


def _table(header, rows, source, caption=None):
    table = nodes.table(classes=["results-table"])
    if caption:
        table += nodes.title(text=caption)
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    body = nodes.tbody()
    group += body
    for cells, part in [(header, head)] + [(r, body) for r in rows]:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            para = nodes.paragraph()
            para.extend(_inline(str(cell)))
            entry += para
            row += entry
        part += row
    note = nodes.paragraph(classes=["results-source"])
    note += nodes.emphasis(text="Read from ")
    note += nodes.literal(text=source)
    note += nodes.emphasis(text=" when these pages were built.")
    return [table, note]


class _ResultsDirective(Directive):
    has_content = False
    default_file = ""
    required_arguments = 0
    optional_arguments = 1
    final_argument_whitespace = False

    def run(self):
        env = self.state.document.settings.env
        try:
            for name in self.arguments[:1] or [self.default_file]:
                if name:
                    env.note_dependency(_path(name))
            return self.build()
        except (ValueError, KeyError, IndexError, json.JSONDecodeError) as exc:
            raise self.error(f"{self.name}: {exc}") from None

    def build(self):  # pragma: no cover - overridden
        raise NotImplementedError


class _JsonTable(_ResultsDirective):
    """A table built from one JSON results file (default_file): no argument, no option."""

    optional_arguments = 0
    option_spec = {}


def _names(option):
    """Comma-separated names; commas inside parentheses belong to the name."""
    if not option:
        return None
    names, depth, cur = [], 0, ""
    for ch in option:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            names.append(cur.strip())
            cur = ""
        else:
            cur += ch
    names.append(cur.strip())
    return names


class ResultsTable(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"section": directives.unchanged, "table": directives.nonnegative_int,
                   "columns": directives.unchanged, "rows": directives.unchanged,
                   "join": directives.unchanged, "join-columns": directives.unchanged,
                   "best": lambda a: directives.choice(a, ("min", "max")),
                   "mean-where": directives.unchanged, "caption": directives.unchanged,
                   "ratio": directives.unchanged, "headers": directives.unchanged}

    def _load(self, name):
        lines = _part(_read(name), self.options.get("section"))
        tables = _tables(lines)
        k = self.options.get("table", 0)
        if k >= len(tables):
            raise ValueError(f"{name}: {len(tables)} table(s) under "
                             f"{self.options.get('section')!r}, asked for number {k}")
        return tables[k]

    def build(self):
        name = self.arguments[0]
        header, rows = self._load(name)
        keep = _names(self.options.get("columns")) or header
        missing = [c for c in keep if c not in header]
        if missing:
            raise ValueError(f"{name}: no column {missing} (has {header})")
        idx = [header.index(c) for c in keep]
        rows = [[r[i] for i in idx] for r in rows]
        header = keep
        sources = [name]
        if "join" in self.options:
            other = self.options["join"]
            oh, orows = self._load(other)
            extra = _names(self.options.get("join-columns")) or oh[1:]
            missing = [c for c in extra if c not in oh]
            if missing:
                raise ValueError(f"{other}: no column {missing} (has {oh})")
            by_key = {r[0]: r for r in orows}
            absent = [r[0] for r in rows if r[0] not in by_key]
            if absent:
                raise ValueError(f"{other}: no row for {absent}")
            rows = [r + [by_key[r[0]][oh.index(c)] for c in extra] for r in rows]
            header = header + extra
            sources.append(other)
        wanted = _names(self.options.get("rows"))
        if wanted:
            picked = []
            for w in wanted:
                match = [r for r in rows if r[0].startswith(w)]
                if not match:
                    raise ValueError(f"{name}: no row starting with {w!r}")
                picked.extend(match)
            rows = picked
        if "best" in self.options:
            rows = [self._bold_best(r, self.options["best"]) for r in rows]
        if "mean-where" in self.options:
            rows.append(self._mean_row(header, rows, self.options["mean-where"]))
        if "ratio" in self.options:
            header, rows = self._ratio(header, rows, self.options["ratio"])
        if "headers" in self.options:
            shown = _names(self.options["headers"])
            if len(shown) != len(header):
                raise ValueError(f"headers: {len(shown)} names for {len(header)} columns "
                                 f"{header}")
            header = shown
        source = " and ".join(f"benchmarks/results/{s}" for s in sources)
        return _table(header, rows, source, self.options.get("caption"))

    @staticmethod
    def _ratio(header, rows, spec):
        """A column 'A / B': the leading number of column A over that of column B."""
        a, _, b = (x.strip() for x in spec.partition("/"))
        for c in (a, b):
            if c not in header:
                raise ValueError(f"ratio: no column {c!r} (has {header})")
        ia, ib = header.index(a), header.index(b)
        out = []
        for r in rows:
            va, vb = _leading_number(r[ia]), _leading_number(r[ib])
            out.append(r + [f"{va / vb:.1f}x" if va is not None and vb else "–"])
        return header + [f"{a} / {b}"], out

    @staticmethod
    def _bold_best(row, how):
        cells = [c.replace("**", "") for c in row]
        values = [(_leading_number(c), j) for j, c in enumerate(cells) if j > 0]
        values = [(v, j) for v, j in values if v is not None]
        if values:
            best = (min if how == "min" else max)(v for v, _ in values)
            cells = [f"**{c}**" if j > 0 and _leading_number(c) == best else c
                     for j, c in enumerate(cells)]
        return cells

    @staticmethod
    def _mean_row(header, rows, spec):
        column, _, value = spec.partition("=")
        if column not in header:
            raise ValueError(f"mean-where: no column {column!r}")
        c = header.index(column)
        chosen = [r for r in rows if r[c] == value]
        if not chosen:
            raise ValueError(f"mean-where: no row with {column} = {value!r}")
        out = [f"mean of the {len(chosen)} {value} sets"] + [""] * (len(header) - 1)
        out[c] = value
        for j in range(1, len(header)):
            if j == c:
                continue
            cells = [r[j] for r in chosen]
            vals = [_leading_number(x) for x in cells]
            if all(v is not None for v in vals):
                out[j] = _fmt_like(mean(vals), cells)
            else:
                out[j] = "–"
        return out


class ResultsList(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"section": directives.unchanged}

    def build(self):
        name = self.arguments[0]
        lines = _part(_read(name), self.options.get("section"))
        items = [ln[2:].strip() for ln in lines if ln.startswith("- ")]
        if not items:
            raise ValueError(f"{name}: no list under {self.options.get('section')!r}")
        blist = nodes.bullet_list()
        for item in items:
            li = nodes.list_item()
            para = nodes.paragraph()
            para.extend(_inline(item))
            li += para
            blist += li
        return [blist]


class ResultsLine(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"match": directives.unchanged_required,
                   "prefix": directives.unchanged}

    def build(self):
        name = self.arguments[0]
        pattern = re.compile(self.options["match"])
        found = [ln.strip() for ln in _read(name).splitlines() if pattern.search(ln)]
        if not found:
            raise ValueError(f"{name}: no line matches {self.options['match']!r}")
        para = nodes.paragraph()
        if self.options.get("prefix"):
            para += nodes.Text(self.options["prefix"] + " ")
        para.extend(_inline(" ".join(found)))
        return [para]


class ResultsCommits(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"section": directives.unchanged}

    def build(self):
        name = self.arguments[0]
        lines = _part(_read(name), self.options.get("section", "Rows merged"))
        commits = []
        for c in re.findall(r"\bcommit ([0-9a-f]{7,40})\b", "\n".join(lines)):
            if c not in commits:
                commits.append(c)
        para = nodes.paragraph()
        if commits:
            para += nodes.Text("The attnx rows of this file were measured at commit"
                               + ("s " if len(commits) > 1 else " "))
            for i, c in enumerate(commits):
                if i:
                    para += nodes.Text(", " if i < len(commits) - 1 else " and ")
                para += nodes.literal(text=c)
            para += nodes.Text("; the other rows come from earlier runs of the same script.")
        else:
            para += nodes.Text("Every row of this file comes from one run.")
        return [para]


def _run_table(run, dtype, configs, threads):
    rows = []
    for res in run["results"]:
        if res["dtype"] != dtype:
            continue
        if configs and not any(c in res["config"] for c in configs):
            continue
        imps = res["impls"]
        a = imps["attnx"]
        name = res["config"] + (" (noisy)" if res.get("foreign_cpu", 0) >= 0.1 else "")
        row = [name, res["mode"], str(run["threads"]), f"{1000 * a['median_s']:.1f}",
               f"{a['gflops']:.0f} ({100 * a['frac_limit']:.0f}%)"]
        for other in ("numpy", "torch", "torch-sdpa"):
            o = imps.get(other)
            row.append(f"{o['ratio']:.2f}x" if o else "-")
        rows.append(row)
    return rows


class ResultsSpeed(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"dtype": directives.unchanged_required, "configs": directives.unchanged,
                   "threads": directives.unchanged}

    def build(self):
        name = self.arguments[0]
        data = _json(name)
        configs = _names(self.options.get("configs"))
        threads = [int(t) for t in _names(self.options.get("threads")) or []]
        rows = []
        for run in data["runs"]:
            if threads and run["threads"] not in threads:
                continue
            rows.extend(_run_table(run, self.options["dtype"], configs, threads))
        if not rows:
            raise ValueError(f"{name}: no race for {self.options}")
        order = {r["config"]: i for i, r in enumerate(data["runs"][0]["results"])}
        rows.sort(key=lambda r: (order.get(r[0].replace(" (noisy)", ""), 0),
                                 r[1] != "train", int(r[2])))
        header = ["config", "mode", "threads", "attnx ms", "attnx GFLOP/s (% of GEMM limit)",
                  "NumPy", "PyTorch", "PyTorch SDPA"]
        return _table(header, rows, f"benchmarks/results/{name}")


class ResultsRun(_ResultsDirective):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {}

    def build(self):
        name = self.arguments[0]
        data = _json(name)
        first = data["runs"][0]
        env = first["env"]
        items = [
            ("attnx commit", data["attnx_commit"]),
            ("run started", data["created"]),
            ("machine", f"{env['cpu']}, {env['cpus']} CPUs; attnx SIMD level "
                        f"{env.get('attnx_simd', '?')}"),
            ("libraries", f"Python {env['python']}, NumPy {env['numpy']}, SciPy "
                          f"{env['scipy']}, PyTorch {env.get('torch', '-')}"),
            ("BLAS", "; ".join(f"{k}: {v}" for k, v in first.get("blas_by_impl", {}).items())),
            ("settings", f"{data['settings']['steps']} timed steps per implementation in "
                         f"{data['settings']['rounds']} interleaved rounds"),
        ]
        for run in data["runs"]:
            lim = run["gemm_limit"]
            parts = [f"{'sgemm' if dt == 'float32' else 'dgemm'} {lim[dt]['scipy']:.0f} GFLOP/s"
                     for dt in ("float32", "float64") if dt in lim]
            n = next(iter(lim.values()))["n"]
            items.append((f"GEMM limit, {run['threads']} thread(s)",
                          ", ".join(parts) + f" ({n}³, through the BLAS attnx calls)"))
        dl = nodes.field_list()
        for key, value in items:
            field = nodes.field()
            field += nodes.field_name(text=key)
            body = nodes.field_body()
            body += nodes.paragraph(text=value)
            field += body
            dl += field
        note = nodes.paragraph(classes=["results-source"])
        note += nodes.emphasis(text="Read from ")
        note += nodes.literal(text=f"benchmarks/results/{name}")
        return [dl, note]


class ResultsCeiling(_ResultsDirective):
    default_file = "ceiling.json"
    required_arguments = 0
    optional_arguments = 0
    option_spec = {"threads": directives.positive_int, "file": directives.unchanged}

    def build(self):
        name = self.options.get("file", "ceiling.json")
        data = _json(name)
        threads = self.options.get("threads", 1)
        rows = []
        for r in data["rows"]:
            if r["threads"] != threads:
                continue
            target = ("60% of the sgemm limit" if r["target"].endswith("lim")
                      else f"{r['target']} SDPA")
            rows.append([r["config"], r["mode"],
                         f"{100 * r['dense_flops'] / r['flops']:.0f}%",
                         f"{1000 * r['bound_s']:.2f}", f"{1000 * r['peak_s']:.2f}",
                         f"{1000 * r['attnx_s']:.2f}", f"{1000 * r['sdpa_s']:.2f}",
                         f"{r['sdpa_s'] / r['attnx_s']:.2f}x", target,
                         f"{100 * r['need']:.0f}%", f"{100 * r['attnx_efficiency']:.0f}%"])
        if not rows:
            raise ValueError(f"{name}: no row at {threads} thread(s)")
        header = ["config", "mode", "dense share", "bound ms", "peak ms", "attnx ms",
                  "SDPA ms", "SDPA / attnx", "target", "need", "attnx at"]
        return _table(header, rows, f"benchmarks/results/{name}")


class ResultsLongSeq(_JsonTable):
    default_file = "long_seq.json"

    def build(self):
        data = _json("long_seq.json")
        rows = []
        for r in data["rows"]:
            rows.append([str(r["T"]), str(r["causal"]), r["attnx_path"],
                         f"{1000 * r['attnx_train']:.0f}", f"{1000 * r['torch-sdpa_train']:.0f}",
                         f"{r['torch-sdpa_train'] / r['attnx_train']:.2f}x",
                         f"{1000 * r['attnx_predict']:.0f}",
                         f"{1000 * r['torch-sdpa_predict']:.0f}",
                         f"{r['torch-sdpa_predict'] / r['attnx_predict']:.2f}x",
                         f"{r['attnx_peak_mib']:.0f}", f"{r['torch-sdpa_peak_mib']:.0f}"])
        header = ["T", "causal", "attnx path", "attnx train ms", "SDPA train ms", "ratio",
                  "attnx forward ms", "SDPA forward ms", "ratio", "attnx MiB", "SDPA MiB"]
        return _table(header, rows, "benchmarks/results/long_seq.json")


class ResultsMpi(_JsonTable):
    default_file = "mpi_epoch.json"

    def build(self):
        data = _json("mpi_epoch.json")
        base = {(r["model"], r["mode"]): r["epoch_s"] for r in data if r["P"] == 1}
        rows = []
        for r in sorted(data, key=lambda r: (r["model"], r["mode"], r["P"])):
            one = base.get((r["model"], r["mode"]))
            rows.append([r["model"], r["mode"], str(r["P"]), f"{r['epoch_s']:.3f} s",
                         f"{one / r['epoch_s']:.2f}x" if one else "-",
                         " / ".join(str(x) for x in r["rows_per_rank"]),
                         f"{100 * r['allreduce_share']:.1f}%"])
        header = ["model", "mode", "ranks", "epoch", "speed-up", "rows per rank and step",
                  "time in Allreduce"]
        return _table(header, rows, "benchmarks/results/mpi_epoch.json")


class ResultsFiles(Directive):
    has_content = False
    option_spec = {}

    def run(self):
        env = self.state.document.settings.env
        docdir = os.path.dirname(env.doc2path(env.docname))
        blist = nodes.bullet_list()
        for dirpath, _, files in sorted(os.walk(RESULTS)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, RESULTS)
                li = nodes.list_item()
                para = nodes.paragraph()
                para += _download_node(os.path.relpath(path, docdir), rel)
                para += nodes.Text(f" ({os.path.getsize(path) / 1024:.1f} KB)")
                li += para
                blist += li
        return [blist]


def _download_node(target, text):
    """A download link, as the :download: role makes it (Sphinx's collector copies the
    file into the built site)."""
    from sphinx import addnodes
    node = addnodes.download_reference("", "", reftarget=target, refdomain="",
                                       reftype="download", refexplicit=True, refwarn=False)
    node += nodes.literal(text=text, classes=["xref", "download"])
    return node


def setup(app):
    for name, cls in [("results-table", ResultsTable), ("results-list", ResultsList),
                      ("results-line", ResultsLine), ("results-commits", ResultsCommits),
                      ("results-speed", ResultsSpeed), ("results-run", ResultsRun),
                      ("results-ceiling", ResultsCeiling),
                      ("results-long-seq", ResultsLongSeq), ("results-mpi", ResultsMpi),
                      ("results-files", ResultsFiles)]:
        app.add_directive(name, cls)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
