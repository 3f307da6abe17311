"""gRPC stubs a vLLM build generates from a .proto of its source: held to the shape protoc and gRPC's Python plugin
write, since their bytes depend on the grpcio-tools the build environment resolved (not on anything the lock knows).

vLLM's setup.py (0.14.0: `compile_grpc_protos`, run by its build_py) writes `<name>_pb2.py`, `<name>_pb2_grpc.py` and
`<name>_pb2.pyi` beside `vllm/grpc/<name>.proto` when grpcio-tools is importable, which is one of its build-system
requirements: a wheel uv builds from the git source (NeMo-RL's uv-source mode) has them; an editable install made
without grpcio-tools has not. A `.pyi` file is never imported. A `.py` stub passes when its syntax tree holds only
what the generators write (tests/fixtures/grpc-stubs: grpcio-tools 1.76.0 and 1.85.1 on vLLM 0.14.0's proto):
imports of protobuf, grpc, warnings and the sibling `_pb2` module; assignments, conditions, classes and functions;
every name one the file imports, defines or takes as a parameter, or one of a few builtins; every attribute one the
generators use (or a message of the pb2 module, a method the file defines on `self` or `servicer`), set only where
they set one; no lambda, comprehension, loop, `global`, `with`, `await` or `del`. That bounds what the file can do to
protobuf's and gRPC's own calls; which messages and methods it describes is not checked against the .proto (that
would take protoc). Pure: no I/O.
"""

from __future__ import annotations

import ast

STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
MAX_STUB_BYTES = 4 << 20  # vLLM 0.14.0's are 8 and 13 KB

_MODULES = ("google.protobuf", "grpc", "warnings")  # and the sibling pb2 module, by its package
_BUILTINS = {"globals", "RuntimeError", "NotImplementedError", "ImportError", "staticmethod", "object"}
# Every attribute the generators read or call, but a message's name on the pb2 module and a method's name (defined in
# the file) on `self` and `servicer`: a module's other attributes reach what it imported (grpc._channel.os ...).
_ATTRIBUTES = {
    # protoc's Python output (protobuf 6 and 7)
    "Default", "AddSerializedFile", "ValidateProtobufRuntimeVersion", "Domain", "PUBLIC",
    "BuildMessageAndEnumDescriptors", "BuildTopDescriptorsAndMessages", "_USE_C_DESCRIPTORS", "_loaded_options",
    "_serialized_options", "_serialized_start", "_serialized_end", "_options",
    # gRPC's Python plugin (grpcio-tools 1.76 and 1.85)
    "__version__", "unary_unary", "unary_stream", "stream_unary", "stream_stream", "unary_unary_rpc_method_handler",
    "unary_stream_rpc_method_handler", "stream_unary_rpc_method_handler", "stream_stream_rpc_method_handler",
    "method_handlers_generic_handler", "add_generic_rpc_handlers", "add_registered_method_handlers", "experimental",
    "StatusCode", "UNIMPLEMENTED", "set_code", "set_details", "SerializeToString", "FromString", "warn",
}  # fmt: skip
_STATEMENTS = (
    ast.Expr, ast.Import, ast.ImportFrom, ast.Assign, ast.If, ast.Try, ast.Raise, ast.ClassDef, ast.FunctionDef,
    ast.Return, ast.Pass, ast.ExceptHandler,
)  # fmt: skip
_EXPRESSIONS = (
    ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.keyword, ast.Subscript, ast.BinOp, ast.Add, ast.UnaryOp,
    ast.Not, ast.JoinedStr, ast.FormattedValue, ast.Dict, ast.Tuple, ast.List, ast.Load, ast.Store, ast.arguments,
    ast.arg, ast.alias,
)  # fmt: skip


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
    except (SyntaxError, ValueError) as exc:
        return f"not Python ({type(exc).__name__})"
    package = path.rsplit("/", 1)[0].replace("/", ".")
    defined = _defined(tree)
    pb2 = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    pb2 = {name for name in pb2 if name.endswith("_pb2")}
    methods = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(tree):
        why = _refused(node, package, defined) or _attribute(node, pb2, methods)
        if why:
            return f"{why} (line {getattr(node, 'lineno', '?')})"
    return None


def _attribute(node: ast.AST, pb2: set[str], methods: set[str]) -> str | None:
    """An attribute the generators write: from their vocabulary, a message of the pb2 module, or a method of the
    file on self or servicer; set only on self, DESCRIPTOR or an entry of _globals. A subscript is a string that
    names no internals."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and not key.value.startswith("__")):
            return "a subscript that is not a message's name"
        return None
    if not isinstance(node, ast.Attribute):
        return None
    owner = node.value.id if isinstance(node.value, ast.Name) else None
    if isinstance(node.ctx, ast.Store) and not (
        owner in ("self", "DESCRIPTOR")
        or (isinstance(node.value, ast.Subscript) and getattr(node.value.value, "id", None) == "_globals")
    ):
        return f"an assignment to {node.attr!r} of {owner or 'an expression'}"
    if node.attr in _ATTRIBUTES:
        return None
    if owner in pb2 and not node.attr.startswith("_"):
        return None  # a message class the pb2 module builds from its descriptor
    if owner in ("self", "servicer") and node.attr in methods:
        return None
    return f"the attribute {node.attr!r}"


def _defined(tree: ast.Module) -> set[str]:
    """Every name the file binds: imports, assignments, classes, functions and their parameters."""
    names = set(_BUILTINS)
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _refused(node: ast.AST, package: str, defined: set[str]) -> str | None:
    if isinstance(node, ast.Module):
        return None
    if not isinstance(node, _STATEMENTS + _EXPRESSIONS):
        return f"{type(node).__name__} is nothing protoc writes"
    if isinstance(node, ast.Import) and not all(_allowed_module(a.name, package) for a in node.names):
        return "an import of another module"
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if node.level or not (
            _allowed_module(module, package) or (module == package and all(a.name.endswith("_pb2") for a in node.names))
        ):
            return f"an import from {module or '.'}"
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in defined:
        return f"the name {node.id!r}, which the file does not define"
    if isinstance(node, ast.Name) and node.id.startswith("__"):
        return f"the name {node.id!r}"
    if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        decorators = [d for d in node.decorator_list if not (isinstance(d, ast.Name) and d.id == "staticmethod")]
        if decorators or getattr(node, "keywords", None) or node.name.startswith("__") and node.name != "__init__":
            return f"the definition of {node.name!r}"
    if isinstance(node, ast.ExceptHandler) and not (isinstance(node.type, ast.Name) and node.type.id == "ImportError"):
        return "an except clause for other than ImportError"
    return None


def _allowed_module(name: str, package: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in _MODULES)
