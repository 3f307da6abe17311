"""gRPC stubs a vLLM build generates from a .proto of its source, held to what gRPC's generators write, since their
bytes depend on the grpcio-tools the build environment resolved (not on anything the lock knows).

vLLM's setup.py (0.14.0: `compile_grpc_protos`, run by its build_py) writes `<name>_pb2.py`, `<name>_pb2_grpc.py` and
`<name>_pb2.pyi` beside `vllm/grpc/<name>.proto` when grpcio-tools is importable, which is one of its build-system
requirements: a wheel uv builds from the git source (NeMo-RL's uv-source mode) has them; an editable install made
without grpcio-tools has not. A `.pyi` file is never imported.

A `.py` stub passes when every statement in it, at every depth, is a statement the generators wrote in the reference
(grpc-reference/: protoc's and gRPC's plugin's output of grpcio-tools 1.76.0 and 1.85.1, a `_pb2` stub held to the
`_pb2` files, a `_pb2_grpc` stub to theirs), in the same place (its enclosing statement), a statement they write once
at most once, up to: constants (each string, bytes and number is one placeholder of its type; the stub's own module
name and .proto path are their own), the names of classes, of the methods in them and of module-level functions (as
a .proto names them: no leading underscore), the `_pb2` modules of the stub's package or of protobuf imported under
the name gRPC's plugin gives them, and those modules' messages. Every other name, attribute, call, argument and
structure must be the generators' own, so the file can do only what their code does: build messages from a
descriptor into its own namespace, check the grpc version, and wire methods to a channel or a server. The descriptor
is read too (protobuf's wire format): it is the stub's own .proto's, and the messages, enums, values, services and
extensions it binds in the module name nothing that starts with `_` or that the file's code reads. Which messages
and methods it describes is not checked against the .proto (that would take protoc). Three adversarial reviews built
stubs that ran code past earlier checks: each is a test (tests/unit/image/test_grpc_stubs.py). Reading
the reference is the only I/O.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import re
from collections import Counter
from pathlib import Path

STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
MAX_STUB_BYTES = 256 << 10  # vLLM 0.14.0's are 8 and 13 KB
REFERENCE = Path(__file__).with_name("grpc-reference")
_OWNERS_OF_METHODS = ("self", "servicer")


def stub_of(path: str, sources: set[str]) -> str | None:
    """The .proto of the source that the package's file `path` would be generated from (None: no stub name, or no
    such .proto in the source)."""
    proto = proto_of(path)
    return proto if proto != path and proto in sources else None


def stub_problem(path: str, data: bytes | None) -> str | None:
    """Why the stub at `path` (the package's name of it: vllm/grpc/x_pb2_grpc.py) is not what the generators write;
    None when it is. `data`: its bytes (None: not kept, too large)."""
    if path.endswith(".pyi"):
        return None  # a type stub: the import system never reads one
    if data is None or len(data) > MAX_STUB_BYTES:
        return "larger than a generated stub"
    try:
        tree = ast.parse(data, path)
        known, once = reference(_kind(path))
        found = statements(tree, path)
        for line, where, statement in found:
            if (where, statement) not in known:
                return f"line {line} is no statement gRPC's generators write there"
        counted = Counter((where, statement) for _line, where, statement in found)
        twice = [
            line for line, where, statement in found if (where, statement) in once and counted[where, statement] > 1
        ]
        if twice:
            return f"line {twice[-1]} repeats a statement the generators write once"
        return _descriptor_problem(tree, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not Python the generators write ({type(exc).__name__})"


def _kind(path: str) -> str:
    return "_pb2_grpc.py" if path.endswith("_pb2_grpc.py") else "_pb2.py"


@functools.cache
def reference(kind: str) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
    """Every (enclosing statement, statement) of the reference files of a kind (`_pb2.py`, `_pb2_grpc.py`), in the
    shape `statements` gives them, and those that stand once in every file that has them."""
    found: set[tuple[str, str]] = set()
    repeated: set[tuple[str, str]] = set()
    for file in sorted(REFERENCE.glob(f"*{kind}.txt")):
        path = "vllm/grpc/" + file.name.split("-", 1)[1].removesuffix(".txt")
        shapes = [(where, statement) for _line, where, statement in statements(ast.parse(file.read_bytes()), path)]
        found |= set(shapes)
        repeated |= {shape for shape, count in Counter(shapes).items() if count > 1}
    if not found:
        raise FileNotFoundError(f"no reference stubs in {REFERENCE}")
    return frozenset(found), frozenset(found - repeated)


def statements(tree: ast.Module, path: str) -> list[tuple[int, str, str]]:
    """(line, enclosing statement, statement) of every statement of the stub at `path`, each in its canonical shape:
    the statement without the statements inside it, its constants and the names the generators choose per .proto
    replaced by placeholders."""
    names = _Names(tree, path)
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


_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,200}")  # a name a .proto gives: no leading underscore, no dunder
_DESCRIPTOR_KEY_RE = re.compile(r"_[A-Z][A-Z0-9_]{0,200}")  # _globals['_SAMPLINGPARAMS']: a descriptor's global


def _mangled(module: str) -> str:
    """The name gRPC's plugin imports a `_pb2` module as (ModuleAlias): `_` doubled, then `.` as `_dot_`."""
    return module.replace("_", "__").replace(".", "_dot_")


class _Names:
    """The names the generators choose per .proto: classes, their methods, module-level functions, and the `_pb2`
    modules imported under the name gRPC's plugin gives them; the stub's own module name and .proto path (strings).
    Everything else keeps its own name in a shape."""

    def __init__(self, tree: ast.Module, path: str):
        self.package = path.rsplit("/", 1)[0].replace("/", ".")
        self.module = path.removesuffix(".py").replace("/", ".")
        self.proto = proto_of(path)
        self.classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and _NAME_RE.fullmatch(n.name)}
        self.functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and _NAME_RE.fullmatch(n.name)}
        self.methods = {
            item.name
            for cls in tree.body
            if isinstance(cls, ast.ClassDef)
            for item in cls.body
            if isinstance(item, ast.FunctionDef) and _NAME_RE.fullmatch(item.name)
        }
        self.modules = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in (self.package, "google.protobuf")
            for alias in node.names
            if alias.name.endswith("_pb2")
            and _NAME_RE.fullmatch(alias.name)
            and alias.asname in (None, _mangled(f"{node.module}.{alias.name}"))
        }

    def shape(self, node: ast.AST) -> str:
        return ast.dump(self._canonical(copy.deepcopy(node)), annotate_fields=True, include_attributes=False)

    def _canonical(self, node: ast.AST) -> ast.AST:
        for child in ast.walk(node):
            if isinstance(child, ast.Subscript) and isinstance(child.slice, ast.Constant):
                # A descriptor's global, or kept as it is (a Name now: the walk already took the old key's node).
                key = child.slice.value
                good = isinstance(key, str) and _DESCRIPTOR_KEY_RE.fullmatch(key)
                child.slice = ast.Name(id="DESCRIPTOR_GLOBAL" if good else f"key {key!r}", ctx=ast.Load())
            elif isinstance(child, ast.Constant) and not isinstance(child.value, (bool, type(None))):
                child.value = self._constant(child.value)
                child.kind = None
            elif isinstance(child, ast.Name):
                child.id = self._name(child.id)
            elif isinstance(child, ast.Attribute):
                owner = child.value.id if isinstance(child.value, ast.Name) else None
                if owner in self.modules and _NAME_RE.fullmatch(child.attr):
                    child.attr = "MESSAGE"
                elif owner in _OWNERS_OF_METHODS and child.attr in self.methods:
                    child.attr = "METHOD"
            elif isinstance(child, ast.ClassDef) and child.name in self.classes:
                child.name = "CLASS"
            elif isinstance(child, ast.FunctionDef):
                child.name = self._name(child.name)
            elif isinstance(child, ast.ImportFrom) and child.module == self.package:
                child.module = "PACKAGE"
            elif isinstance(child, ast.alias) and (child.asname or child.name) in self.modules:
                child.name, child.asname = ("PB2", "PB2_MODULE") if child.asname else ("PB2_MODULE", None)
        return node

    def _constant(self, value: object) -> str | bytes | int | float | complex:
        if value == self.module:
            return "MODULE_NAME"  # _builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, '<its own module>', ...)
        if value == self.proto:
            return "PROTO_PATH"
        if isinstance(value, str):
            return "S"
        if isinstance(value, bytes):
            return b"B"
        return type(value)() if isinstance(value, (int, float, complex)) else "OTHER"

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


def proto_of(path: str) -> str:
    """The .proto a stub is generated from: vllm/grpc/x_pb2_grpc.py -> vllm/grpc/x.proto (`path` itself when it is
    no stub's name)."""
    for suffix in STUB_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)] + ".proto"
    return path


def _descriptor_problem(tree: ast.Module, path: str) -> str | None:
    """The serialized file descriptor a `_pb2` stub adds (protobuf's builder then writes a class or a value into the
    module for each top-level message, enum value, enum, extension and service it names): it is for the stub's own
    .proto, and names nothing that starts with `_` or that the file's code reads."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | _BUILTIN_NAMES
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        call = node.value
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "AddSerializedFile"):
            continue
        literal = call.args[0]
        if not (isinstance(literal, ast.Constant) and isinstance(literal.value, bytes)):
            return f"line {node.lineno} adds a descriptor that is no bytes literal"
        file_name, names = descriptor_names(literal.value)
        if file_name != proto_of(path):
            return f"line {node.lineno} adds a descriptor of {file_name!r}, not of {proto_of(path)}"
        odd = sorted(n for n in names if not _NAME_RE.fullmatch(n) or n in used)
        if odd:
            return f"line {node.lineno} adds a descriptor whose names shadow the module's: {', '.join(odd[:3])}"
    return None


_BUILTIN_NAMES = frozenset(dir(builtins))
# FileDescriptorProto: name 1, message_type 4, enum_type 5, service 6, extension 7; DescriptorProto,
# EnumDescriptorProto, ServiceDescriptorProto and FieldDescriptorProto: name 1; EnumDescriptorProto: value 2.
_TOP = {4: "message", 5: "enum", 6: "service", 7: "extension"}


def descriptor_names(data: bytes) -> tuple[str, set[str]]:
    """A serialized FileDescriptorProto's file name and the names protobuf's builder binds in the module: top-level
    messages, enums, enum values, services and extensions. ValueError when it is not protobuf's wire format."""
    name, names = "", set()
    for field, value in _fields(data):
        if field == 1 and isinstance(value, bytes):
            name = value.decode("utf-8")
        elif field in _TOP and isinstance(value, bytes):
            inner = dict(_fields(value)) if field != 5 else None
            if field == 5:
                for f, v in _fields(value):
                    if f == 1 and isinstance(v, bytes):
                        names.add(v.decode("utf-8"))
                    elif f == 2 and isinstance(v, bytes):
                        names |= {n.decode("utf-8") for g, n in _fields(v) if g == 1 and isinstance(n, bytes)}
            elif inner is not None and isinstance(own := inner.get(1), bytes):
                names.add(own.decode("utf-8"))
    return name, names


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message: varints as ints, length-delimited as bytes, fixed as ints.
    Every step moves forward, and no length goes past the end."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((field, value))
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("a length past the end of the descriptor")
            out.append((field, data[at : at + size]))
            at += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if at + width > len(data):
                raise ValueError("a fixed field past the end of the descriptor")
            out.append((field, int.from_bytes(data[at : at + width], "little")))
            at += width
        else:
            raise ValueError(f"wire type {wire} in a descriptor")
    return out


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a varint past the end of the descriptor")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
