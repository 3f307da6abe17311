"""gRPC stubs a vLLM build generates from a .proto of its source, held to what gRPC's generators write, since their
bytes depend on the grpcio-tools the build environment resolved (not on anything the lock knows).

vLLM's setup.py (0.14.0: `compile_grpc_protos`, run by its build_py) writes `<name>_pb2.py`, `<name>_pb2_grpc.py` and
`<name>_pb2.pyi` beside `vllm/grpc/<name>.proto` when grpcio-tools is importable, which is one of its build-system
requirements: a wheel uv builds from the git source (NeMo-RL's uv-source mode) has them; an editable install made
without grpcio-tools has not. A `.pyi` file is never imported.

A `.py` stub passes when every statement in it, at every depth, is a statement the generators wrote in the reference
(grpc-reference/: protoc's and gRPC's plugin's output of grpcio-tools 1.76.0 and 1.85.1), in the same place (its
enclosing statement), up to: constants (each string, bytes and number is one placeholder of its type), the names of
classes, of the methods in them and of module-level functions, the names the `_pb2` modules are imported as (an
import of a `_pb2` module of the stub's own package or of protobuf), and the attributes of those modules (messages).
Every other name, attribute, call, argument and structure must be the generators' own, so the file can do only what
their code does: build messages from a descriptor into its own namespace, check the grpc version, and wire methods to
a channel or a server. Which messages and methods it describes is not checked against the .proto (that would take
protoc). Reading the reference is the only I/O.
"""

from __future__ import annotations

import ast
import copy
import functools
from pathlib import Path

STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
MAX_STUB_BYTES = 256 << 10  # vLLM 0.14.0's are 8 and 13 KB
REFERENCE = Path(__file__).with_name("grpc-reference")
_OWNERS_OF_METHODS = ("self", "servicer")


def stub_of(path: str, sources: set[str]) -> str | None:
    """The .proto of the source that the package's file `path` would be generated from (None: no stub name, or no
    such .proto in the source)."""
    for suffix in STUB_SUFFIXES:
        if path.endswith(suffix):
            proto = path[: -len(suffix)] + ".proto"
            return proto if proto in sources else None
    return None


def stub_problem(path: str, data: bytes | None) -> str | None:
    """Why the stub at `path` (the package's name of it: vllm/grpc/x_pb2_grpc.py) is not what the generators write;
    None when it is. `data`: its bytes (None: not kept, too large)."""
    if path.endswith(".pyi"):
        return None  # a type stub: the import system never reads one
    if data is None or len(data) > MAX_STUB_BYTES:
        return "larger than a generated stub"
    try:
        tree = ast.parse(data, path)
        package = path.rsplit("/", 1)[0].replace("/", ".")
        known = reference_statements()
        for line, where, statement in statements(tree, package):
            if (where, statement) not in known:
                return f"line {line} is no statement gRPC's generators write there"
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not Python the generators write ({type(exc).__name__})"
    return None


@functools.cache
def reference_statements() -> frozenset[tuple[str, str]]:
    """Every (enclosing statement, statement) of the reference files, in the shape `statements` gives them."""
    found: set[tuple[str, str]] = set()
    for path in sorted(REFERENCE.glob("*_pb2*.py.txt")):
        tree = ast.parse(path.read_bytes(), path.name)
        found |= {(where, statement) for _line, where, statement in statements(tree, "vllm.grpc")}
    if not found:
        raise FileNotFoundError(f"no reference stubs in {REFERENCE}")
    return frozenset(found)


def statements(tree: ast.Module, package: str) -> list[tuple[int, str, str]]:
    """(line, enclosing statement, statement) of every statement, each in its canonical shape: the statement without
    the statements inside it, its constants and the names the generators choose per .proto replaced by placeholders."""
    names = _Names(tree, package)
    out: list[tuple[int, str, str]] = []

    def visit(body: list[ast.stmt], where: str) -> None:
        for node in body:
            shape = names.shape(_head(node))
            out.append((node.lineno, where, shape))
            for suffix, inner in _bodies(node):
                visit(inner, shape + suffix)

    visit(tree.body, "module")
    return out


def _head(node: ast.stmt) -> ast.stmt:
    """The statement without the statements it holds (each is judged on its own, in its place)."""
    head = copy.copy(node)
    for field in ("body", "orelse", "finalbody"):
        if hasattr(head, field):
            setattr(head, field, [])
    if isinstance(head, ast.Try):
        head.handlers = [ast.ExceptHandler(type=h.type, name=h.name, body=[]) for h in head.handlers]
    return head


def _bodies(node: ast.stmt) -> list[tuple[str, list[ast.stmt]]]:
    bodies = [("", getattr(node, "body", [])), (" else", getattr(node, "orelse", []))]
    bodies += [(f" except {i}", h.body) for i, h in enumerate(getattr(node, "handlers", []))]
    return [(suffix, body) for suffix, body in bodies if body]


class _Names:
    """The names the generators choose per .proto: classes, their methods, module-level functions, and the names
    `_pb2` modules are imported as. Everything else keeps its own name in a shape."""

    def __init__(self, tree: ast.Module, package: str):
        self.package = package
        self.classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.methods = {
            item.name
            for cls in tree.body
            if isinstance(cls, ast.ClassDef)
            for item in cls.body
            if isinstance(item, ast.FunctionDef) and not item.name.startswith("__")
        }
        self.modules = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in (package, "google.protobuf")
            for alias in node.names
            if alias.name.endswith("_pb2") and not alias.name.startswith("_")
        }

    def shape(self, node: ast.AST) -> str:
        return ast.dump(self._canonical(copy.deepcopy(node)), annotate_fields=True, include_attributes=False)

    def _canonical(self, node: ast.AST) -> ast.AST:
        for child in ast.walk(node):
            if isinstance(child, ast.Constant) and not isinstance(child.value, (bool, type(None))):
                value = child.value
                child.value = "S" if isinstance(value, str) else b"B" if isinstance(value, bytes) else type(value)()
                child.kind = None
            elif isinstance(child, ast.Name):
                child.id = self._name(child.id)
            elif isinstance(child, ast.Attribute):
                owner = child.value.id if isinstance(child.value, ast.Name) else None
                if owner in self.modules and not child.attr.startswith("_"):
                    child.attr = "MESSAGE"
                elif owner in _OWNERS_OF_METHODS and child.attr in self.methods:
                    child.attr = "METHOD"
            elif isinstance(child, ast.ClassDef):
                child.name = "CLASS"
            elif isinstance(child, ast.FunctionDef):
                child.name = self._name(child.name)
            elif isinstance(child, ast.ImportFrom) and child.module == self.package:
                child.module = "PACKAGE"
            elif isinstance(child, ast.alias) and (child.asname or child.name) in self.modules:
                child.name, child.asname = ("PB2", "PB2_MODULE") if child.asname else ("PB2_MODULE", None)
        return node

    def _name(self, name: str) -> str:
        if name in self.modules:
            return "PB2_MODULE"
        if name in self.classes:
            return "CLASS"
        if name in self.functions:
            return "FUNCTION"
        if name in self.methods:
            return "METHOD"
        return name
