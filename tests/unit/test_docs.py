"""The documents hold no stale link and no stale command.

README.md and docs/**/*.md: every relative link and image resolves to a file, and every anchor to
a heading of its file (GitHub's slugs). Every command of a fenced ``sh`` (or unlabelled) block is
checked without starting a broker: ``make`` targets and variables exist in the Makefile;
``python -m <module> ...`` and ``kbroker ...`` have their arguments parsed by the program's own
argparse parser (in a subprocess of the virtualenv's python, stopped right after parsing) and
answer ``--help`` with exit 0; ``python -m pytest`` names test files that exist; Kafka's tools
(``kafka-*.sh``, or ``java ... org.apache.kafka.tools.X``) are rows of the tool table in
docs/compatibility.md with a test that runs them. Inline ``make ...`` and ``python -m ...`` spans
name targets and modules that exist.

This is the half that does not run them: tests/integration/test_docs_commands_run.py runs these
same commands against real kbroker processes, page by page, or names each one it does not run
(``EXCLUDED``) with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMPATIBILITY = ROOT / "docs" / "compatibility.md"
SHELL_BLOCKS = {"", "sh", "bash", "shell"}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- Markdown -------------------------------------------------------------------------------------


def split_fences(text: str) -> tuple[str, list[tuple[str, int, list[str]]]]:
    """The text with fenced blocks blanked (line numbers kept), and the blocks: (info, first line, lines)."""
    out: list[str] = []
    blocks: list[tuple[str, int, list[str]]] = []
    block: list[str] | None = None
    info = ""
    start = 0
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if block is None:
                block, info, start = [], stripped[3:].strip(), number + 1
            else:
                blocks.append((info, start, block))
                block = None
            out.append("")
        elif block is not None:
            block.append(line)
            out.append("")
        else:
            out.append(line)
    assert block is None, f"unclosed fence from line {start - 1}"
    return "\n".join(out), blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, punctuation dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split_fences(path.read_text())
    seen: dict[str, int] = {}
    found = set()
    for line in prose.split("\n"):
        m = re.match(r"^#{1,6} +(.+?) *#* *$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> list[tuple[int, str, bool]]:
    """(line, target, is_image) of every inline link and image outside code."""
    prose, _ = split_fences(path.read_text())
    # Code spans may hold brackets and parentheses; blank them, keeping the newlines.
    prose = re.sub(r"`[^`]+`", lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    found = []
    for m in LINK.finditer(prose):
        line = prose.count("\n", 0, m.start()) + 1
        found.append((line, m.group(3), m.group(1) == "!"))
    return found


def link_problems(path: Path) -> list[str]:
    problems = []
    for line, target, image in links(path):
        where = f"{rel(path)}:{line}: {target}"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where}: outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}: no such file")
            continue
        if image and not resolved.is_file():
            problems.append(f"{where}: an image that is not a file")
        if anchor:
            if resolved.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(resolved):
                problems.append(f"{where}: no heading with that anchor in {rel(resolved)}")
    return problems


def test_every_link_and_image_resolves() -> None:
    problems = [p for path in DOCS for p in link_problems(path)]
    assert not problems, "\n".join(problems)


def test_every_document_is_linked_from_another() -> None:
    linked = set()
    for path in DOCS:
        for _, target, _ in links(path):
            file_part = target.partition("#")[0]
            if file_part and not re.match(r"^[a-z][a-z0-9+.-]*:", file_part):
                linked.add((path.parent / file_part).resolve())
    orphans = [rel(p) for p in DOCS if p != ROOT / "README.md" and p.resolve() not in linked]
    assert not orphans, f"documents no other document links to: {orphans}"


# --- Commands -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.words)}"


def shell_lines(lines: list[str], first: int) -> list[tuple[int, str]]:
    """Logical lines of a block (backslash continuations joined), with their first line number."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(lines, first):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def words(line: str) -> list[str]:
    # <placeholders> may hold spaces; ... and … stand for what a reader fills in.
    line = re.sub(r"<[^<>\n]+>", "PLACEHOLDER", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def stages(tokens: list[str]) -> list[list[str]]:
    """A command line's simple commands: split at pipes and command separators, env assignments
    and ``time`` dropped."""
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in {"|", "||", "&&", ";", "&"}:
            out.append([])
        else:
            out[-1].append(token)
    cleaned = []
    for stage in out:
        while stage and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", stage[0]) or stage[0] == "time"):
            stage = stage[1:]
        if stage:
            cleaned.append(stage)
    return cleaned


KNOWN = re.compile(r"^(\$|make|python3?|\.venv/bin/python|kbroker|\.venv/bin/kbroker|kafka-[a-z-]+\.sh|java|\.|source|printf|echo|cat)$")


def looks_like_a_command(tokens: list[str]) -> bool:
    if not tokens or not KNOWN.match(tokens[0]):
        return False
    return tokens[0] != "java" or tokens[1:2] != [] and tokens[1].startswith("-")


def commands() -> list[Command]:
    found = []
    for path in DOCS:
        _, blocks = split_fences(path.read_text())
        for info, first, lines in blocks:
            if info and info.split()[0] not in SHELL_BLOCKS:
                continue
            for number, line in shell_lines(lines, first):
                tokens = words(line)
                if tokens and tokens[0] == "$":
                    tokens = tokens[1:]
                elif not info and not looks_like_a_command(tokens):
                    continue  # an unlabelled block: program output, not a command
                for stage in stages(tokens):
                    found.append(Command(f"{rel(path)}:{number}", tuple(stage)))
    return found


COMMANDS = commands()


def makefile() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text()
    targets = set()
    for m in re.finditer(r"^([A-Za-z0-9_.-]+(?: [A-Za-z0-9_.-]+)*):(?!=)", text, re.M):
        targets.update(m.group(1).split())
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:+]?=", text, re.M)) | set(re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", text))
    return targets, variables


def tool_table() -> dict[str, list[str]]:
    """Tool name or Java class -> the test files its row names."""
    table: dict[str, list[str]] = {}
    for line in COMPATIBILITY.read_text().split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`kafka-"):
            continue
        tests = re.findall(r"`(tests/[^`]+\.py)`", cells[3])
        for name in re.findall(r"`([^`]+)`", cells[0] + " " + cells[1]):
            table[name] = tests
    return table


def kind(command: Command) -> str:
    head = command.words[0]
    if head == "make":
        return "make"
    if head in {"python", "python3", ".venv/bin/python"}:
        return "pytest" if command.words[1:3] == ("-m", "pytest") else "python"
    if head in {"kbroker", ".venv/bin/kbroker"}:
        return "kbroker"
    if re.match(r"^kafka-[a-z-]+\.sh$", head) or head == "java":
        return "kafka-tool"
    if head in {".", "source"}:
        return "source"
    if head in {"printf", "echo", "cat"}:
        return "shell"
    return "unknown"


def test_the_documents_hold_commands() -> None:
    kinds = {kind(c) for c in COMMANDS}
    assert {"make", "python", "kbroker", "kafka-tool"} <= kinds, kinds


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_command_is_known_and_its_files_exist(command: Command) -> None:
    what = kind(command)
    assert what != "unknown", f"{command}: a command test_docs does not know how to check"
    if what == "make":
        targets, variables = makefile()
        for word in command.words[1:]:
            if "=" in word:
                assert word.split("=", 1)[0] in variables, f"{command}: the Makefile has no variable {word.split('=', 1)[0]}"
            elif not word.startswith("-"):
                assert word in targets, f"{command}: the Makefile has no target {word}"
    elif what == "pytest":
        for word in command.words[3:]:
            if word.startswith("tests"):
                assert (ROOT / word.split("::")[0]).exists(), f"{command}: no {word}"
    elif what == "kafka-tool":
        table = tool_table()
        if command.words[0] == "java":
            names = [w for w in command.words if re.match(r"^(org\.apache\.)?kafka\.", w)]
            assert names, f"{command}: no Kafka class named"
            name = names[0]
        else:
            name = command.words[0]
        assert name in table, f"{command}: {name} is not in the tool table of docs/compatibility.md"
        assert table[name], f"{command}: the tool table names no test that runs {name}"
        for test in table[name]:
            assert (ROOT / test).exists(), f"{command}: the tool table names {test}, which does not exist"
    elif what == "source":
        assert command.words[1:] == (".venv/bin/activate",), f"{command}: only the virtualenv is sourced"


# --- Parsing the commands' arguments, in one subprocess ------------------------------------------

PARSER = r'''
import argparse, contextlib, importlib.util, io, json, runpy, sys, traceback

class Parsed(BaseException):
    pass

real = argparse.ArgumentParser.parse_args

def stop_after_parsing(self, args=None, namespace=None):
    real(self, args, namespace)
    raise Parsed()

def run(module, argv, stop):
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            spec = importlib.util.find_spec(module + ".__main__")
    except ImportError:
        spec = None
    if spec is None or spec.origin is None:
        return "no such module"
    origin = spec.origin
    if "parse_args" not in open(origin).read():
        return "parses no arguments with argparse: cannot be checked without running it"
    argparse.ArgumentParser.parse_args = stop_after_parsing if stop else real
    out = io.StringIO()
    sys.argv = [module, *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Parsed:
        return None
    except SystemExit as e:
        if e.code in (0, None):
            return None
        return f"exit {e.code}: {out.getvalue()[-2000:]}"
    except Exception:
        return traceback.format_exc()[-2000:]
    finally:
        argparse.ArgumentParser.parse_args = real
    return "returned without parsing its arguments"

results = {}
for key, module, argv in json.load(sys.stdin):
    leading = []
    for word in argv:
        if word.startswith("-"):
            break
        leading.append(word)
    parsed = run(module, argv, stop=True)
    helped = run(module, [*leading, "--help"], stop=False)
    results[key] = [parsed, helped]
json.dump(results, sys.stdout)
'''


def venv_python() -> str:
    candidate = ROOT / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def program(command: Command) -> tuple[str, list[str]]:
    words = list(command.words)
    if kind(command) == "kbroker":
        return "broker.cli", words[1:]
    assert words[1] == "-m", f"{command}: python without -m"
    return words[2], words[3:]


PROGRAMS = [c for c in COMMANDS if kind(c) in {"python", "kbroker"}]


@pytest.fixture(scope="module")
def parse_results() -> dict[str, list[str | None]]:
    items = [[str(c), *program(c)] for c in PROGRAMS]
    done = subprocess.run(
        [venv_python(), "-c", PARSER], input=json.dumps(items), capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("command", PROGRAMS, ids=str)
def test_command_parses_and_answers_help(command: Command, parse_results: dict[str, list[str | None]]) -> None:
    parsed, helped = parse_results[str(command)]
    assert parsed is None, f"{command}: its arguments do not parse: {parsed}"
    assert helped is None, f"{command}: --help does not exit 0: {helped}"


# --- Inline commands ------------------------------------------------------------------------------


def inline_spans() -> list[tuple[str, str]]:
    spans = []
    for path in DOCS:
        prose, _ = split_fences(path.read_text())
        for m in re.finditer(r"`([^`]+)`", prose):
            line = prose.count("\n", 0, m.start()) + 1
            spans.append((f"{rel(path)}:{line}", " ".join(m.group(1).split())))
    return spans


def test_inline_make_targets_and_python_modules_exist() -> None:
    targets, variables = makefile()
    problems = []
    sys.path.insert(0, str(ROOT))
    try:
        for where, span in inline_spans():
            if re.match(r"^make [a-z]", span):
                for word in span.split()[1:]:
                    name = word.split("=", 1)[0]
                    if "=" in word and name.isupper() and name not in variables:
                        problems.append(f"{where}: `{span}`: no Makefile variable {name}")
                    elif "=" not in word and re.match(r"^[a-z][a-z-]*$", word) and word not in targets:
                        problems.append(f"{where}: `{span}`: no Makefile target {word}")
            m = re.match(r"^(?:\S*python3?) -m ([A-Za-z_][\w.]*)", span)
            if m and m.group(1) != "pytest" and not m.group(1).endswith("."):
                try:
                    missing = importlib.util.find_spec(m.group(1)) is None
                except ImportError:
                    missing = True
                if missing:
                    problems.append(f"{where}: `{span}`: no module {m.group(1)}")
    finally:
        sys.path.remove(str(ROOT))
    assert not problems, "\n".join(problems)
