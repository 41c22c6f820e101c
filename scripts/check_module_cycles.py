#!/usr/bin/env python3
"""Find import cycles between the modules of each crate under crates/.

For every crate (crates/*/src/lib.rs, and src/main.rs when it is a separate
binary root) this builds, per module that has submodules (the crate root and
every folder or file module with children), a graph whose nodes are those
submodules: an edge a -> b means code in module a (or anything below it)
names something in module b (or below it) through a `crate::`, `super::` or
`self::` path, in a `use` declaration or inline. A child naming its own
parent's items is not an edge (the parent is its facade), and neither is the
parent naming its children. Items the crate root or a folder module
re-exports (`pub use a::Item`) are resolved to the module they come from, so
`crate::Statement` counts as a reference to the module defining it.

Test-only modules (`#[cfg(test)] mod ...`) are skipped unless --tests is
given: a test reaching across modules does not make the library's layering
circular.

Exit status: 0 when no graph has a cycle, 1 naming every cycle otherwise
(each strongly connected component, its elementary cycles, and one place in
the source for each edge), 2 on bad arguments.

Usage: scripts/check_module_cycles.py [--tests] [CRATE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

MAX_CYCLES_PER_COMPONENT = 40

CHAR_LITERAL = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^'\\\n])'")
RAW_STRING = re.compile(r'b?r(#*)"')
MOD_DECL = re.compile(
    r"((?:#\s*!?\s*\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*([;{])"
)
PATH_ATTR = re.compile(r'#\s*\[\s*path\s*=\s*"([^"]*)"\s*\]')
USE_DECL = re.compile(r"(?<![\w$])use\s+([^;]*);")
INLINE_PATH = re.compile(r"(?<![\w:$])((?:crate|super|self)(?:\s*::\s*(?:r#)?[A-Za-z_]\w*)+)")


def strip_code(text: str) -> str:
    """Blank comments, string and char literals, keeping offsets and newlines."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and RAW_STRING.match(text, i):
            m = RAW_STRING.match(text, i)
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            m = CHAR_LITERAL.match(text, i)
            if m:
                blank(i, m.end())
                i = m.end()
            else:
                i += 1  # a lifetime or label
        else:
            i += 1
    return "".join(out)


def is_test_only(attrs: str) -> bool:
    return any(re.search(r"\btest\b", a) for a in re.findall(r"cfg\s*\(([^\]]*)\)", attrs))


def expand_use(tree: str) -> list[tuple[list[str], str]]:
    """The paths a use tree imports, each with the name it is visible under
    (`a::{b, c::d as e}` -> (a::b, b), (a::c::d, e))."""
    tokens = re.findall(r"::|[{},*]|(?:r#)?[A-Za-z_]\w*", tree)
    pos = 0

    def parse(prefix: list[str]) -> list[tuple[list[str], str]]:
        nonlocal pos
        path = list(prefix)
        alias = None
        out: list[tuple[list[str], str]] = []
        while pos < len(tokens):
            t = tokens[pos]
            if t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    out.extend(parse(path))
                pos += 1
                return out
            if t in (",", "}"):
                break
            if t == "as":
                alias = tokens[pos + 1] if pos + 1 < len(tokens) else None
                pos += 2
                continue
            if t != "::":
                path.append(t.removeprefix("r#"))
            pos += 1
        if path and path[-1] == "self":
            path = path[:-1]
        if path:
            out.append((path, alias or path[-1]))
        return out

    paths = []
    while pos < len(tokens):
        if tokens[pos] == ",":
            pos += 1
            continue
        before = pos
        paths.extend(parse([]))
        if pos == before:
            pos += 1
    return paths


class Module:
    def __init__(self, path: tuple[str, ...], file: str, test: bool):
        self.path = path
        self.file = file
        self.test = test
        self.children: dict[str, Module] = {}
        self.reexports: dict[str, list[str]] = {}  # item -> path it names


class Crate:
    def __init__(self, name: str, root_file: str, include_tests: bool):
        self.name = name
        self.include_tests = include_tests
        self.root = Module((), root_file, False)
        # (module, file, line, path segments) for every reference found
        self.refs: list[tuple[Module, str, int, list[str]]] = []
        self.load_file(self.root, root_file, os.path.dirname(root_file))

    def load_file(self, module: Module, file: str, child_dir: str) -> None:
        with open(file, encoding="utf-8") as f:
            code = strip_code(f.read())
        line_at = _line_index(code)
        # Inline module scopes: (name, depth at its open brace, module).
        scopes: list[tuple[int, Module]] = []
        events = []
        for m in MOD_DECL.finditer(code):
            events.append((m.start(2), "mod", m))
        for m in USE_DECL.finditer(code):
            events.append((m.start(), "use", m))
        use_spans = [(m.start(), m.end()) for m in USE_DECL.finditer(code)]
        for m in INLINE_PATH.finditer(code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            if re.search(r"\bin\s*$", code[max(0, m.start() - 8) : m.start()]):
                continue  # pub(in crate::x) is visibility, not a use
            events.append((m.start(), "path", m))
        for i, ch in enumerate(code):
            if ch in "{}":
                events.append((i, ch, None))
        events.sort(key=lambda e: e[0])
        depth = 0
        pending_inline: Module | None = None
        for pos, kind, m in events:
            current = scopes[-1][1] if scopes else module
            skip = current.test and not self.include_tests
            if kind == "{":
                depth += 1
                if pending_inline is not None:
                    scopes.append((depth, pending_inline))
                    pending_inline = None
            elif kind == "}":
                if scopes and scopes[-1][0] == depth:
                    scopes.pop()
                depth -= 1
            elif kind == "mod":
                attrs, name, term = m.group(1), m.group(2), m.group(3)
                test = current.test or is_test_only(attrs)
                if test and not self.include_tests:
                    child = Module(current.path + (name,), file, True)
                else:
                    child = Module(current.path + (name,), file, test)
                    current.children[name] = child
                if term == "{":
                    pending_inline = child
                elif not child.test or self.include_tests:
                    self.load_child(child, attrs, file, child_dir, scopes)
            elif skip:
                continue
            elif kind == "use":
                public = re.search(r"\bpub(\s*\([^)]*\))?\s*$", code[max(0, pos - 24) : pos])
                for path, visible in expand_use(m.group(1)):
                    self.refs.append((current, file, line_at(pos), path))
                    if public and visible not in ("*", "_"):
                        current.reexports[visible] = path
            elif kind == "path":
                segs = [s.strip().removeprefix("r#") for s in m.group(1).split("::")]
                self.refs.append((current, file, line_at(pos), segs))

    def load_child(self, child: Module, attrs: str, file: str, child_dir: str, scopes) -> None:
        path_attr = PATH_ATTR.search(attrs)
        # Files of an inline module's children live in a folder named after it.
        inline_dirs = [s[1].path[-1] for s in scopes]
        base = os.path.join(child_dir, *inline_dirs)
        name = child.path[-1]
        if path_attr:
            candidates = [os.path.join(os.path.dirname(file), path_attr.group(1))]
        else:
            candidates = [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]
        for c in candidates:
            if os.path.isfile(c):
                own_dir = os.path.dirname(c) if c.endswith("mod.rs") else os.path.join(base, name)
                child.file = c
                self.load_file(child, c, own_dir)
                return

    def find(self, path: list[str]) -> tuple[tuple[str, ...], list[str]]:
        """The longest module prefix of an absolute path, following re-exports."""
        node, i, seen = self.root, 0, 0
        while i < len(path) and seen < 16:
            seg = path[i]
            if seg in node.children:
                node, i = node.children[seg], i + 1
            elif seg in node.reexports:
                target = self.absolute(node, node.reexports[seg])
                if target is None:
                    break
                node, rest = self.root, target + path[i + 1 :]
                path, i, seen = rest, 0, seen + 1
            else:
                break
        return node.path, path[i:]

    def absolute(self, module: Module, segs: list[str]) -> list[str] | None:
        base = list(module.path)
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] == "self":
            return base + segs[1:]
        if segs[0] == "super":
            k = 0
            while k < len(segs) and segs[k] == "super":
                k += 1
            if k > len(base):
                return None
            return base[: len(base) - k] + segs[k:]
        if segs[0] in module.children:
            return base + segs
        return None  # another crate, or a local item

    def graphs(self):
        """Per container module path, edges child -> child with one example place each."""
        graphs: dict[tuple[str, ...], dict[tuple[str, str], tuple[str, int, str]]] = defaultdict(dict)
        for module, file, line, segs in self.refs:
            target = self.absolute(module, segs)
            if target is None:
                continue
            found, _ = self.find(target)
            src = module.path
            k = 0
            while k < len(src) and k < len(found) and src[k] == found[k]:
                k += 1
            if k < len(src) and k < len(found):
                edge = (src[k], found[k])
                graphs[src[:k]].setdefault(edge, (file, line, "::".join(segs)))
        return graphs


def _line_index(code: str):
    starts = [0] + [i + 1 for i, c in enumerate(code) if c == "\n"]

    def line_at(pos: int) -> int:
        lo, hi = 0, len(starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid
        return lo + 1

    return line_at


def components(nodes, adj):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def cycles_in(comp, adj, limit):
    """Elementary cycles of one component, each starting at its smallest node."""
    found = []
    members = set(comp)
    for start in comp:
        stack = [(start, [start])]
        while stack and len(found) < limit:
            v, path = stack.pop()
            for w in sorted(adj[v], reverse=True):
                if w not in members or w < start:
                    continue
                if w == start:
                    found.append(path + [start])
                elif w not in path:
                    stack.append((w, path + [w]))
    return found


def crate_roots(repo: str, wanted: set[str]):
    base = os.path.join(repo, "crates")
    for name in sorted(os.listdir(base)):
        src = os.path.join(base, name, "src")
        if wanted and name not in wanted:
            continue
        if not os.path.isdir(src):
            continue
        lib, main = os.path.join(src, "lib.rs"), os.path.join(src, "main.rs")
        if os.path.isfile(lib):
            yield name, lib
        if os.path.isfile(main):
            yield (f"{name} (bin)" if os.path.isfile(lib) else name), main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crates", nargs="*", help="crate folder names under crates/ (default: all)")
    parser.add_argument("--tests", action="store_true", help="also follow test-only modules")
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    wanted = set(args.crates)
    known = set(os.listdir(os.path.join(args.repo, "crates")))
    if wanted - known:
        print(f"unknown crate(s): {', '.join(sorted(wanted - known))}", file=sys.stderr)
        return 2
    total = 0
    for name, root in crate_roots(args.repo, wanted):
        crate = Crate(name, root, args.tests)
        for container, edges in sorted(crate.graphs().items()):
            adj = defaultdict(set)
            for a, b in edges:
                adj[a].add(b)
                adj[b]
            where = "crate root" if not container else "module " + "::".join(container)
            for comp in components(list(adj), adj):
                total += 1
                print(f"{name}: import cycle among the submodules of the {where}: {{{', '.join(comp)}}}")
                cycles = cycles_in(comp, adj, MAX_CYCLES_PER_COMPONENT)
                for c in cycles:
                    print("  cycle: " + " -> ".join(c))
                if len(cycles) >= MAX_CYCLES_PER_COMPONENT:
                    print(f"  (first {MAX_CYCLES_PER_COMPONENT} cycles shown)")
                for (a, b), (file, line, path) in sorted(edges.items()):
                    if a in comp and b in comp:
                        rel = os.path.relpath(file, args.repo)
                        print(f"    {a} -> {b}: {rel}:{line} ({path})")
    if total:
        print(f"{total} import cycle(s) found", file=sys.stderr)
        return 1
    print("no import cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
