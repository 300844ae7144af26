"""Nothing received from the network is unpickled, except by broadcast_object /
allgather_object (perseus/common/objects.py), whose bytes come from authenticated peers of
the job. A static check over the package: every call that can unpickle or evaluate data must
be in the allow-list below; a new one fails this test until it is reviewed."""

import ast
from pathlib import Path

import relsupport as rs

PACKAGE = rs.REPO / "python" / "perseus"
# Calls that deserialize code or objects from bytes.
DANGEROUS = {("pickle", "loads"), ("pickle", "load"), ("cloudpickle", "loads"),
             ("cloudpickle", "load"), ("_pickler", "loads"), ("_pickler", "load"),
             ("marshal", "loads"), ("torch", "load"), ("dill", "loads"), (None, "eval"),
             (None, "exec")}
ALLOWED = {("common/objects.py", "_loads")}  # broadcast_object / allgather_object


def _calls(tree):
    """(innermost enclosing function, module-or-None, attribute, node) for every call."""
    out = []

    def visit(node, func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                out.append((func, f.value.id, f.attr, node))
            elif isinstance(f, ast.Name):
                out.append((func, None, f.id, node))
            if (isinstance(f, ast.Attribute) and f.attr == "load"
                    and any(k.arg == "allow_pickle" for k in node.keywords)):
                out.append((func, "numpy", "load(allow_pickle)", node))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "<module>")
    return out


def test_only_object_collectives_unpickle():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel.startswith("examples/"):
            continue  # user-facing scripts, not the library
        tree = ast.parse(path.read_text(), str(path))
        for func, mod, attr, node in _calls(tree):
            if (mod, attr) in DANGEROUS or attr == "load(allow_pickle)":
                found.add((rel, func, "%s.%s" % (mod, attr), node.lineno))
    unexpected = {f for f in found if (f[0], f[1]) not in ALLOWED}
    assert not unexpected, "unpickling outside the reviewed places: %s" % sorted(unexpected)
    assert {(f[0], f[1]) for f in found} == ALLOWED, found


def test_object_collectives_feed_unpickling_only_from_collectives():
    """_loads() is only called on arrays that broadcast/allgather filled (authenticated peers
    of the job): the only callers are broadcast_object and allgather_object."""
    tree = ast.parse((PACKAGE / "common" / "objects.py").read_text())
    callers = {func for func, mod, attr, _ in _calls(tree) if attr == "_loads" and mod is None}
    assert callers == {"broadcast_object", "allgather_object"}, callers
