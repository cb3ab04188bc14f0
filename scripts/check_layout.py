#!/usr/bin/env python3
"""Checks the layout rules of the tree (README.md, "Layout"); exits 1 on any
breach, listing each, and 0 with a one-line summary otherwise.

  - the design card's top level is there (CARD);
  - each library includes only itself and the libraries below it (FLOORS);
  - libarchive only in src/archive/, <fuse_lowlevel.h> only in src/mount/fuse_adapter.cc;
  - no include loop between units (x.h and x.cc are one unit), and no comment
    in a library naming a file of one above it;
  - the unit tests respect the floors too: tests/unit/<library>/ (tests and
    support code) includes only what <library> may, and tests/unit's support
    headers of those libraries' folders (tests/unit/*.h: base/'s); each
    x_test.cc there (or x_<aspect>_test.cc) tests a unit x.cc of <library>;
  - no product file over MAX_FILE_LINES lines, no function over
    MAX_FUNCTION_LINES (C++ and Python, the bench included);
  - no C++ unit (x.h + x.cc, and the x_*.cc of a class spread over several
    files) over MAX_UNIT_LINES, but the named UNIT_EXCEPTIONS (a ratchet),
    each reported as a note;
  - no issue-tracker number (a hash and digits, or "issue N") in shipped text,
    every tracked .md file included.

Usage: scripts/check_layout.py [--list-functions N]  (also prints every
function longer than N lines, to see what is close to the limit)
       scripts/check_layout.py --untested  (only lists each library unit x.cc
without a tests/unit/<library>/x_test.cc, for the notes on where it is covered;
the check fails when there are more than UNTESTED_AT_MOST, a ratchet)
"""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE_LINES = 650
MAX_FUNCTION_LINES = 80
# A unit is x.h with x.cc and the x_*.cc that have no header of their own (a
# class spread over several files: index/db_reader_open.cc is db_reader's).
MAX_UNIT_LINES = 900
# A ratchet: the units over MAX_UNIT_LINES today, each with why it is not
# cut yet. The list may only shrink: never add a unit to it, and remove one
# as soon as it fits (the check fails on an entry under the cap).
UNIT_EXCEPTIONS = {
    "index/schema": "the byte layout lives in one file by design (STYLE.md): every key and value "
                    "with its Encode/Decode pair",
    "src/reader/chunk_cache": "S3-FIFO eviction and the node's shared chunk directory (claims, "
                              "adoption, trim) in one class; the directory's part is a unit of "
                              "its own to come",
}
# A ratchet: library units x.cc without a tests/unit/<library>/x_test.cc of
# their own (--untested lists them). The count may only fall: lower this
# number whenever a unit gets its test.
UNTESTED_AT_MOST = 55

# The design card's top level: what the repository opens with.
CARD = ["meson.build", "src", "index", "tools", "tests", "man", "README.md"]

# Each library (a folder) and what it may include besides itself, bottom
# first: base/ the ground, index/ the format, src/ the runtime, tools/ the
# write side and the command. Only the direct list is allowed: a library that
# needs one further down names it.
FLOORS = {
    "base": [],
    "index": ["base"],
    "src/remote": ["base"],
    "src/codec": ["base", "index"],
    "src/archive": ["base", "index", "src/codec"],
    "src/reader": ["base", "index", "src/remote", "src/codec"],
    "src/erofs": ["base", "index"],
    "src/indexref": ["base", "index", "src/remote", "src/reader"],
    "src/mount": ["base", "index", "src/remote", "src/codec", "src/reader", "src/erofs",
                  "src/indexref"],
    "src/python": ["base", "index", "src/reader", "src/indexref"],
    "tools/builder": ["base", "index", "src/remote", "src/codec", "src/archive"],
    "tools/pack": ["base", "index", "src/remote", "src/codec", "src/archive", "tools/builder"],
    "tools/cli": ["base", "index", "src/remote", "src/codec", "src/archive", "src/reader",
                  "src/erofs", "src/indexref", "src/mount", "tools/builder", "tools/pack"],
    "tools/python_build": ["base", "index", "src/remote", "src/codec", "src/archive", "src/python",
                           "tools/builder", "tools/pack"],
    "tools/bench": ["base"],
}
# Tests may use every library.
FLOORS["tests"] = list(FLOORS)
PRODUCT = [k for k in FLOORS if k != "tests"]
# The read path's libraries: never the write side, never libarchive; the
# Python extension besides never the mount.
READ_PATH = ["src/reader", "src/python"]
WRITE_SIDE = ["tools/builder", "tools/pack", "src/archive"]
# The only includer of <fuse_lowlevel.h>.
FUSE_EDGE = "src/mount/fuse_adapter.cc"


def library_of(rel):
    """The library (a FLOORS key) path `rel` lies in, or None."""
    best = None
    for lib in FLOORS:
        if rel == lib or rel.startswith(lib + "/"):
            if best is None or len(lib) > len(best):
                best = lib
    return best


INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)
ISSUE_NUMBER = re.compile(r"(?<![\w&/#])#\d+\b|\bissues?\s+#?\d+\b", re.I)


def files_under(folder, exts):
    top = os.path.join(ROOT, folder)
    for d, dirs, names in os.walk(top):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
        for n in sorted(names):
            if n.endswith(exts):
                yield os.path.relpath(os.path.join(d, n), ROOT)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def unit_of(rel):
    return re.sub(r"\.(cc|h)$", "", rel)


def check_includes(errors):
    graph = {}
    for lib in FLOORS:
        for rel in files_under(lib, (".cc", ".h")):
            text = read(rel)
            unit = unit_of(rel)
            graph.setdefault(unit, set())
            for kind, target in INCLUDE.findall(text):
                if kind == "<":
                    if target.startswith("archive") and lib not in ("src/archive", "tests"):
                        errors.append(f"{rel}: includes <{target}>: libarchive belongs to "
                                      "src/archive/")
                    if target == "fuse_lowlevel.h" and rel != FUSE_EDGE and lib != "tests":
                        errors.append(f"{rel}: includes <fuse_lowlevel.h>: only {FUSE_EDGE}")
                    continue
                top = library_of(target)
                if top is None:
                    continue  # a system header written with quotes
                if not os.path.exists(os.path.join(ROOT, target)):
                    errors.append(f"{rel}: includes \"{target}\", which is not in the tree")
                    continue
                if top != lib and top not in FLOORS[lib]:
                    errors.append(f"{rel}: includes {target}: {lib}/ may not use {top}/")
                if lib in READ_PATH and top in WRITE_SIDE:
                    errors.append(f"{rel}: the read path includes {target} (write side)")
                if unit_of(target) != unit:
                    graph[unit].add(unit_of(target))
            check_upward_comments(rel, lib, text, errors)
    # Include loops: a cycle among units.
    state, stack, loops = {}, [], []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                loops.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    sys.setrecursionlimit(10000)
    for u in sorted(graph):
        if u not in state:
            visit(u)
    for loop in loops:
        errors.append("include loop: " + " -> ".join(loop))


# The folder of each library's unit tests: tests/unit/<its last name>/.
UNIT_TEST_FOLDERS = {os.path.basename(lib): lib for lib in PRODUCT
                     if lib not in ("src/python", "tools/bench")}


def unit_test_floor(rel):
    """The library whose floor a file of tests/unit/ stands on: its folder's,
    base/ for tests/unit/ itself (what every library's tests share); None
    for a folder that is no library's."""
    parts = rel.split("/")
    if len(parts) == 3:
        return "base"
    return UNIT_TEST_FOLDERS.get(parts[2])


def check_unit_tests(errors):
    """tests/unit/<library>/ uses only <library> and what it may use, as the
    library does: its binary links that library alone (tests/unit/meson.build)."""
    for rel in files_under("tests/unit", (".cc", ".h")):
        lib = unit_test_floor(rel)
        if lib is None:
            errors.append(f"{rel}: tests/unit/{rel.split('/')[2]}/ is no library's folder")
            continue
        allowed = {lib, *FLOORS[lib]}
        seen = set()
        pending = [(t, rel) for k, t in INCLUDE.findall(read(rel)) if k == '"']
        while pending:
            target, via = pending.pop()
            if target in seen or not os.path.exists(os.path.join(ROOT, target)):
                continue  # check_includes names a missing header
            seen.add(target)
            how = "" if via == rel else f" (through {via})"
            if target.startswith("tests/unit/"):
                top = unit_test_floor(target)
                if top not in allowed:
                    errors.append(f"{rel}: includes {target}{how}, support code of {top}/: "
                                  f"the tests of {lib}/ may not use {top}/")
            elif target.startswith("tests/"):
                # Another layer's helper (tests/fuzz/): what it includes counts.
                pending += [(t, target) for k, t in INCLUDE.findall(read(target)) if k == '"']
            else:
                top = library_of(target)
                if top is not None and top not in allowed:
                    errors.append(f"{rel}: includes {target}{how}: the tests of {lib}/ may "
                                  f"not use {top}/ (move the test to the library it needs)")
        name = os.path.basename(rel)
        if name.endswith("_test.cc") and rel.count("/") == 3:
            words = name[:-len("_test.cc")].split("_")
            stems = ["_".join(words[:n]) for n in range(len(words), 0, -1)]
            if not any(os.path.exists(os.path.join(ROOT, lib, s + ".cc")) for s in stems):
                errors.append(f"{rel}: tests no unit of {lib}/ (x_test.cc or "
                              f"x_<aspect>_test.cc tests {lib}/x.cc)")


UPWARD = re.compile(r"\b((?:src|tools)/[a-z_]+)/[\w.]*")


def check_upward_comments(rel, lib, text, errors):
    """A lower library's comments name no file of a library above it: who
    uses a library is said once, in its meson.build header."""
    if lib == "tests":
        return
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#include"):
            continue
        for m in UPWARD.finditer(line):
            target = m.group(1)
            if target in FLOORS and target != lib and target not in FLOORS[lib]:
                errors.append(f"{rel}:{no}: names {m.group(0)}, above {lib}/ (say who uses a "
                              f"library in its meson.build)")


def strip_cpp(text):
    """Blanks comments, strings and character literals, keeping newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


NOT_FUNCTION = re.compile(r"^\s*(namespace|class|struct|union|enum|extern|if|for|while|switch|"
                          r"do|else|try|catch|return)\b")


def cpp_functions(rel):
    """Yields (name, first line, lines) of each function body in a C++ file:
    a '{' whose statement has a parameter list, met at namespace or class
    scope (lambdas and blocks inside a body belong to that body)."""
    text = strip_cpp(read(rel))
    scopes = []  # for each open brace: True if it opens a function body
    stmt_start = 0
    for i, c in enumerate(text):
        if c == "{":
            in_body = any(s[0] for s in scopes)
            head = text[stmt_start:i]
            is_fn = (not in_body and "(" in head and not NOT_FUNCTION.match(head)
                     and not re.search(r"=\s*$", head))
            scopes.append((is_fn, i, head))
            stmt_start = i + 1
        elif c == "}":
            if scopes:
                is_fn, start, head = scopes.pop()
                if is_fn:
                    first = text.count("\n", 0, start) + 1
                    last = text.count("\n", 0, i) + 1
                    name = re.findall(r"([~\w:]+)\s*\(", head)
                    yield (name[0] if name else "?", first, last - first + 1)
            stmt_start = i + 1
        elif c == ";":
            stmt_start = i + 1


def py_functions(rel):
    tree = ast.parse(read(rel), rel)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def check_sizes(errors, list_over):
    for lib in PRODUCT:
        for rel in files_under(lib, (".cc", ".h", ".py")):
            lines = read(rel).count("\n")
            if lines > MAX_FILE_LINES:
                errors.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
            fns = py_functions(rel) if rel.endswith(".py") else cpp_functions(rel)
            for name, first, n in fns:
                if n > MAX_FUNCTION_LINES:
                    errors.append(f"{rel}:{first}: function {name} is {n} lines "
                                  f"(at most {MAX_FUNCTION_LINES})")
                elif list_over and n > list_over:
                    print(f"note: {rel}:{first}: {name} {n} lines")


def units(lib):
    """{unit: lines} of the C++ units of library `lib`: x.h + x.cc, plus each
    x_*.cc without an x_*.h, counted with the longest such x of its folder."""
    out = {}
    for rel in files_under(lib, (".cc", ".h")):
        unit = unit_of(rel)
        if rel.endswith(".cc") and not os.path.exists(os.path.join(ROOT, unit + ".h")):
            folder, stem = os.path.split(unit)
            owners = [h[:-2] for h in os.listdir(os.path.join(ROOT, folder))
                      if h.endswith(".h") and stem.startswith(h[:-2] + "_")]
            if owners:
                unit = os.path.join(folder, max(owners, key=len))
        out[unit] = out.get(unit, 0) + read(rel).count("\n")
    return out


def check_units(errors, notes):
    """Each unit within MAX_UNIT_LINES but the named exceptions, which are
    reported as notes; an exception that fits is an error (the ratchet)."""
    sizes = {}
    for lib in PRODUCT:
        sizes.update(units(lib))
    for unit, lines in sorted(sizes.items()):
        if lines <= MAX_UNIT_LINES:
            continue
        if unit in UNIT_EXCEPTIONS:
            notes.append(f"note: {unit}: {lines} lines (over MAX_UNIT_LINES = {MAX_UNIT_LINES}, "
                         f"an exception: {UNIT_EXCEPTIONS[unit]})")
        else:
            errors.append(f"{unit}: {lines} lines in the unit (x.h + x.cc; at most "
                          f"{MAX_UNIT_LINES}): move what belongs elsewhere to its own unit")
    for unit in sorted(UNIT_EXCEPTIONS):
        if sizes.get(unit, 0) <= MAX_UNIT_LINES:
            errors.append(f"{unit}: {sizes.get(unit, 0)} lines, within MAX_UNIT_LINES: remove it "
                          "from UNIT_EXCEPTIONS (a ratchet)")


def tracked_markdown():
    """Every .md file the repository ships (git's list: not node_modules or
    build directories)."""
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "*.md"], capture_output=True,
                         text=True, check=True).stdout
    return [rel for rel in out.splitlines() if rel]


def check_issue_numbers(errors):
    shipped = [rel for lib in PRODUCT for rel in files_under(lib, (".cc", ".h", ".py", ".build"))]
    shipped += ["meson.build"] + list(files_under("man", (".1",)))
    shipped += tracked_markdown()
    shipped += list(files_under("scripts", (".sh", ".py")))
    for rel in shipped:
        for no, line in enumerate(read(rel).splitlines(), 1):
            if line.lstrip().startswith("#include") or line.lstrip().startswith("#!"):
                continue
            for m in ISSUE_NUMBER.finditer(line):
                errors.append(f"{rel}:{no}: issue number {m.group(0)} in shipped text")


def untested_units():
    """(unit x.cc, the unit tests that include x.h) for each library unit
    without a tests/unit/<library>/x_test.cc."""
    tests = {rel: set(t for _, t in INCLUDE.findall(read(rel)))
             for rel in files_under("tests/unit", ("_test.cc",))}
    out = []
    for lib in PRODUCT:
        if lib in ("tools/bench", "src/python", "tools/python_build"):
            continue
        for rel in files_under(lib, (".cc",)):
            name = os.path.basename(rel)[:-3]
            folder = os.path.basename(lib)
            if os.path.exists(os.path.join(ROOT, "tests", "unit", folder, name + "_test.cc")):
                continue
            header = rel[:-3] + ".h"
            users = sorted(os.path.relpath(t, "tests/unit") for t, inc in tests.items()
                           if header in inc)
            out.append((rel, users))
    return out


def untested():
    for rel, users in untested_units():
        print(f"{rel}: " + (", ".join(users) if users else "integration tests only"))
    return 0


def main():
    if sys.argv[1:] == ["--untested"]:
        return untested()
    list_over = 0
    if len(sys.argv) == 3 and sys.argv[1] == "--list-functions":
        list_over = int(sys.argv[2])
    errors = []
    for entry in CARD:
        if not os.path.exists(os.path.join(ROOT, entry)):
            errors.append(f"{entry}: the design card's top level names it, and it is missing")
    missing = [lib for lib in FLOORS if not os.path.isdir(os.path.join(ROOT, lib))]
    for lib in missing:
        errors.append(f"{lib}/: a library the rules name is missing")
    check_includes(errors)
    check_unit_tests(errors)
    check_sizes(errors, list_over)
    notes = []
    check_units(errors, notes)
    check_issue_numbers(errors)
    count = len(untested_units())
    if count > UNTESTED_AT_MOST:
        errors.append(f"{count} library units without a unit test of their own, more than "
                      f"UNTESTED_AT_MOST = {UNTESTED_AT_MOST} (--untested lists them): give the "
                      "new unit its tests/unit/<library>/x_test.cc")
    for line in notes + errors:
        print(line)
    if errors:
        print(f"check_layout: {len(errors)} breach(es)")
        return 1
    print(f"check_layout: {len(FLOORS)} folders, rules hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
