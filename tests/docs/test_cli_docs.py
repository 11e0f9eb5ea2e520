"""docs/guide/cli.rst lists every option of every command with its --help text and its
default, as rendered here from the parser: the page cannot drift from `--help`.

After changing an option: `PYTHONPATH=. python tests/docs/test_cli_docs.py --write` rewrites
the lists between the page's `.. options: COMMAND` and `.. end options` markers.
"""
import argparse
import re
import sys
import textwrap
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "cli.rst"
BLOCK = re.compile(r"(?ms)^\.\. options: (\S+)\n(.*?)^\.\. end options\n")


def _commands():
    from attnx.__main__ import _parser

    top = _parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    out = {"demo": top}
    out.update(subs.choices)
    return out


def _rst(text):
    return re.sub(r"`([^`]+)`", r"``\1``", text.replace("%%", "%"))


def render(parser):
    """The option list of one command as reStructuredText (a definition list)."""
    fmt = parser._get_formatter()
    lines = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
                action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = fmt._format_action_invocation(action)
        else:
            name = action.dest
        if action.required:
            tail = " (required)"
        elif (action.option_strings and action.nargs != 0 and action.default is not None):
            d = action.default
            d = " ".join(map(str, d)) if isinstance(d, (tuple, list)) else d
            tail = f" (default: ``{d}``)"
        else:
            tail = ""
        lines.append(f"``{name}``{tail}")
        lines.append(textwrap.fill(_rst(action.help or ""), width=88, initial_indent="   ",
                                   subsequent_indent="   ", break_on_hyphens=False,
                                   break_long_words=False))
        lines.append("")
    return "\n".join(lines)


def expected(page_text):
    cmds = _commands()

    def sub(m):
        return f".. options: {m[1]}\n\n{render(cmds[m[1]])}\n.. end options\n"
    return BLOCK.sub(sub, page_text)


def test_the_page_lists_every_command_and_option_as_help_does():
    text = PAGE.read_text(encoding="utf-8")
    listed = BLOCK.findall(text)
    assert sorted(c for c, _ in listed) == sorted(
        c for c, p in _commands().items() if c != "bench"), "a command has no option list"
    want = expected(text)
    assert text == want, ("docs/guide/cli.rst disagrees with --help; run "
                          "`PYTHONPATH=. python tests/docs/test_cli_docs.py --write`")


def test_the_prose_names_only_options_that_exist():
    """Options the page names outside the generated lists exist, and no default stated
    in its prose contradicts the parser's (e.g. "--steps (1500 ...)")."""
    text = BLOCK.sub("", PAGE.read_text(encoding="utf-8"))
    known = {s for p in _commands().values() for a in p._actions for s in a.option_strings}
    named = set(re.findall(r"``(--?[a-z][\w-]*)", text))
    assert named and named <= known, named - known
    assert not re.search(r"\(default[^)]*\)", text), "defaults belong in the option lists"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        PAGE.write_text(expected(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote {PAGE}")
    else:
        print(__doc__)
