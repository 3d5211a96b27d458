#!/usr/bin/env python3
"""Checks the package dependency diagram in docs/architecture.md against the BUILD files.

Usage: architecture_diagram.py [ROOT]           check (ROOT: the repository's root; default .)
       architecture_diagram.py --print [ROOT]   print the diagram the BUILD files give

The diagram is the fenced block that follows the line holding DIAGRAM_MARKER. Each line is

    PACKAGE -> DEP, DEP (tests), ...      or just    PACKAGE      (it depends on no package)

where a DEP marked "(tests)" is used only by tests and testonly targets of PACKAGE. A package is
a top-level directory with a BUILD.bazel; its subpackages (executor/testing,
planner_service/metrics) count as the package itself. IGNORED packages (tests, benchmarks,
scripts, Bazel glue, docs) are neither listed nor followed.

Every BUILD.bazel under ROOT says which packages depend on which: every label `//pkg...` that a
rule names in any attribute but `visibility` (deps, data, srcs, args' $(location ...)), from a
rule whose kind ends in `_test` or that is `testonly` ("(tests)"), or from any other rule. The
check fails, naming the edge, when the diagram misses an edge or lists one the BUILD files do
not have, marks an edge "(tests)" that a non-test target uses or the other way round, lists a
package that has no BUILD.bazel or leaves one out, and when the dependencies form a cycle.
"""
import ast
import os
import re
import sys

DIAGRAM_MARKER = 'dependency diagram: checked by //tests:architecture_diagram_test'
DOC = 'docs/architecture.md'
IGNORED = {'bench', 'docs', 'tests', 'third_party', 'tools'}
TEST_MARK = '(tests)'
LABEL = re.compile(r'(?:^|[\s(])//([A-Za-z0-9_.-]+)')


def is_test_rule(call):
    name = call.func.id if isinstance(call.func, ast.Name) else ''
    if name.endswith('_test'):
        return True
    for kw in call.keywords:
        if kw.arg == 'testonly' and isinstance(kw.value, ast.Constant):
            return bool(kw.value.value)
    return False


def strings(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def build_edges(root):
    """{(package, dep): 'prod' | 'tests'} and the set of packages with a BUILD file."""
    packages = set()
    edges = {}
    files = []
    for top in sorted(os.listdir(root)):
        path = os.path.join(root, top)
        if top.startswith(('.', 'bazel-')) or os.path.islink(path) or not os.path.isdir(path):
            continue
        for directory, subdirs, names in os.walk(path):  # does not follow links
            subdirs[:] = [d for d in subdirs if not d.startswith('.')]
            if 'BUILD.bazel' in names:
                files.append(os.path.join(directory, 'BUILD.bazel'))
    for path in files:
        package = os.path.relpath(path, root).split(os.sep)[0]
        if package in IGNORED or package.startswith('bazel-'):
            continue
        packages.add(package)
        with open(path) as f:
            tree = ast.parse(f.read(), filename=path)
        for stmt in tree.body:
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                continue
            call = stmt.value
            if isinstance(call.func, ast.Name) and call.func.id in ('load', 'package'):
                continue
            kind = 'tests' if is_test_rule(call) else 'prod'
            for kw in call.keywords:
                if kw.arg == 'visibility':
                    continue
                for text in strings(kw.value):
                    for dep in LABEL.findall(text):
                        if dep == package or dep in IGNORED:
                            continue
                        if edges.get((package, dep)) != 'prod':
                            edges[(package, dep)] = kind
    return packages, edges


def diagram_edges(doc_path):
    """(listed packages, {(package, dep): 'prod' | 'tests'}, errors) from the doc's diagram."""
    with open(doc_path) as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if DIAGRAM_MARKER in line), None)
    if start is None:
        return set(), {}, [f'{doc_path}: no line holding "{DIAGRAM_MARKER}"']
    fence = next((i for i in range(start + 1, len(lines)) if lines[i].startswith('```')), None)
    end = None if fence is None else next(
        (i for i in range(fence + 1, len(lines)) if lines[i].startswith('```')), None)
    if end is None:
        return set(), {}, [f'{doc_path}: no fenced block after the diagram marker']
    listed, edges, errors = set(), {}, []
    for number in range(fence + 1, end):
        line = lines[number].split('#')[0].strip()
        if not line:
            continue
        where = f'{doc_path}:{number + 1}'
        package, _, deps = (part.strip() for part in line.partition('->'))
        if not re.fullmatch(r'[A-Za-z0-9_]+', package):
            errors.append(f'{where}: cannot read "{lines[number]}" (want "PACKAGE -> DEP, ...")')
            continue
        if package in listed:
            errors.append(f'{where}: package {package} listed twice')
        listed.add(package)
        for item in filter(None, (d.strip() for d in deps.split(','))):
            kind = 'prod'
            if item.endswith(TEST_MARK):
                kind, item = 'tests', item[:-len(TEST_MARK)].strip()
            if not re.fullmatch(r'[A-Za-z0-9_]+', item):
                errors.append(f'{where}: cannot read dependency "{item}"')
                continue
            edges[(package, item)] = kind
    return listed, edges, errors


def find_cycle(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    state = {}

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph.get(node, [])):
            if state.get(nxt) == 'open':
                return path + [node, nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [node])
                if cycle:
                    return cycle
        state[node] = 'done'
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle[cycle.index(cycle[-1]):]
    return None


def describe(kind):
    return 'used by tests only' if kind == 'tests' else 'used by non-test targets'


def render(packages, edges):
    """The diagram's lines, dependents first (a package before the packages it depends on)."""
    order, seen = [], set()

    def visit(node):
        if node in seen:
            return
        seen.add(node)
        for (a, b) in edges:
            if b == node:
                visit(a)
        order.append(node)

    for package in sorted(packages):
        visit(package)
    width = max(len(p) for p in packages)
    lines = []
    for package in order:
        deps = sorted((b for (a, b) in edges if a == package),
                      key=lambda b: (edges[(package, b)] == 'tests', order.index(b)))
        text = ', '.join(b + (' ' + TEST_MARK if edges[(package, b)] == 'tests' else '')
                         for b in deps)
        lines.append(f'{package:<{width}} -> {text}' if text else package)
    return lines


def main(argv):
    args = argv[1:]
    print_only = '--print' in args
    args = [a for a in args if a != '--print']
    root = args[0] if args else '.'
    packages, actual = build_edges(root)
    if print_only:
        print('\n'.join(render(packages, actual)))
        return 0
    listed, drawn, errors = diagram_edges(os.path.join(root, DOC))
    if not packages:
        errors.append(f'no BUILD.bazel found under {root}')
    for package in sorted(packages - listed):
        errors.append(f'package {package} has a BUILD.bazel but is not in the diagram')
    for package in sorted(listed - packages):
        errors.append(f'the diagram lists {package}, which has no BUILD.bazel here')
    for (a, b) in sorted(set(actual) | set(drawn)):
        if b not in packages and (a, b) in actual:
            errors.append(f'{a} -> {b}: a BUILD.bazel of {a} names //{b}, which has no '
                          'BUILD.bazel')
        elif (a, b) not in drawn:
            errors.append(f'missing edge {a} -> {b} ({describe(actual[(a, b)])}; '
                          'see its BUILD.bazel)')
        elif (a, b) not in actual:
            errors.append(f'extra edge {a} -> {b}: no BUILD.bazel of {a} names //{b}')
        elif actual[(a, b)] != drawn[(a, b)]:
            want = f'{b} {TEST_MARK}' if actual[(a, b)] == 'tests' else b
            errors.append(f'edge {a} -> {b} is {describe(actual[(a, b)])}: write it "{want}"')
    cycle = find_cycle(actual)
    if cycle:
        errors.append('the dependencies form a cycle: ' + ' -> '.join(cycle))
    for error in errors:
        print('FAIL', error)
    if errors:
        return 1
    print(f'OK: {len(actual)} edges between {len(packages)} packages match {DOC}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
