"""The import rules import-linter has no contract for (`make lint` runs this after it).

1. No import circles: the modules of the project's packages must import each other without a
   cycle (function-level imports included: they still tie the modules together). Each group
   of modules that import each other in a circle is printed with, for every import inside the
   group, one shortest circle through it (`a -> b (l.12) -> a (l.40)`), so each import that
   needs to change is named.
2. The one exception to "only scheduling.backends imports kubernetes" (pyproject.toml's
   contract) is exact: core.quantity imports `kubernetes.utils.quantity` and nothing else of
   the client. import-linter sees an external package as one module, so it cannot say that.

Exits 1 when a rule is broken. Run from the repository root: `python scripts/check_imports.py`.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
# The project's packages; `policies` becomes one when the policies app moves out of quotas/.
PACKAGES = ("core", "portal", "quotas", "scheduling", "billing", "policies", "allot_cli")
QUANTITY_MODULE = "core.quantity"
QUANTITY_IMPORT = re.compile(r"^\s*(from\s+kubernetes\.utils\.quantity\s+import\b"
                             r"|import\s+kubernetes\.utils\.quantity\b)")


def build_graph() -> grimp.ImportGraph:
    sys.path.insert(0, str(ROOT))
    present = [p for p in PACKAGES if (ROOT / p / "__init__.py").exists()]
    return grimp.build_graph(*present, include_external_packages=True, cache_dir=None)


def strongly_connected(graph: grimp.ImportGraph, modules: Iterable[str]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.find_modules_directly_imported_by(succ)))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def shortest_path(graph: grimp.ImportGraph, start: str, goal: str, within: set[str]
                  ) -> list[str]:
    """The shortest import chain start -> ... -> goal through modules of `within`."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for succ in sorted(graph.find_modules_directly_imported_by(node) & within):
            if succ not in previous:
                previous[succ] = node
                queue.append(succ)
    raise AssertionError(f"{goal} is not reachable from {start}")


def lines(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    numbers = sorted({d["line_number"] for d in graph.get_import_details(
        importer=importer, imported=imported)})
    return "l." + ", ".join(map(str, numbers))


def circles(graph: grimp.ImportGraph, group: list[str]) -> list[list[str]]:
    """For each import inside the group, the shortest circle through it (each circle once)."""
    members = set(group)
    seen: set[tuple[str, ...]] = set()
    found = []
    for importer in group:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            circle = [importer, *shortest_path(graph, imported, importer, members)]
            body = circle[:-1]
            turn = body.index(min(body))
            key = tuple(body[turn:] + body[:turn])
            if key not in seen:
                seen.add(key)
                found.append([*key, key[0]])
    return found


def check_cycles(graph: grimp.ImportGraph) -> bool:
    project = {m for m in graph.modules if not graph.is_module_squashed(m)}
    groups = strongly_connected(graph, project)
    for group in groups:
        print(f"Import circle among {len(group)} modules: {', '.join(group)}")
        for circle in circles(graph, group):
            chain = circle[0] + "".join(
                f" -> {b} ({lines(graph, a, b)})" for a, b in zip(circle, circle[1:], strict=False))
            print(f"  {chain}")
        print()
    return not groups


def check_quantity_exception(graph: grimp.ImportGraph) -> bool:
    if QUANTITY_MODULE not in graph.modules or "kubernetes" not in graph.modules:
        return True
    wrong = [d for d in graph.get_import_details(importer=QUANTITY_MODULE, imported="kubernetes")
             if not QUANTITY_IMPORT.match(d["line_contents"])]
    for d in wrong:
        print(f"{QUANTITY_MODULE} may import only kubernetes.utils.quantity of the Kubernetes "
              f"client: l.{d['line_number']}: {d['line_contents'].strip()}")
    return not wrong


def main() -> int:
    graph = build_graph()
    ok = check_cycles(graph)
    ok = check_quantity_exception(graph) and ok
    if ok:
        print("Import rules kept: no import circles; core.quantity imports only "
              "kubernetes.utils.quantity of the Kubernetes client.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
