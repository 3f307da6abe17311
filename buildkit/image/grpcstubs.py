"""gRPC stubs a vLLM build generates from a .proto of its source: held to the shape protoc and gRPC's Python plugin
write, since their bytes depend on the grpcio-tools the build environment resolved (not on anything the lock knows).

vLLM's setup.py (0.14.0: `compile_grpc_protos`, run by its build_py) writes `<name>_pb2.py`, `<name>_pb2_grpc.py` and
`<name>_pb2.pyi` beside `vllm/grpc/<name>.proto` when grpcio-tools is importable, which is one of its build-system
requirements: a wheel uv builds from the git source (NeMo-RL's uv-source mode) has them; an editable install made
without grpcio-tools has not. A `.pyi` file is never imported. A `.py` stub passes when its syntax tree holds only
what the generators write (tests/fixtures/grpc-stubs: grpcio-tools 1.76.0 and 1.85.1 on vLLM 0.14.0's proto):
  - imports: exactly the modules and names they import, under the names they give them (`from google.protobuf
    import descriptor as _descriptor` ...), and `<x>_pb2` modules of the stub's own package or of protobuf;
  - statements: assignments, `if`, `try ... except ImportError`, `raise` of RuntimeError or NotImplementedError,
    classes (no base but `object`, no keyword, only methods in them) and functions (constant defaults, no decorator
    but `staticmethod`); no lambda, comprehension, loop, `with`, `del`, `global`, star or walrus;
  - names: none binds a builtin's name; a name read is bound in the file or one of six builtins;
  - attributes: one the generators read (their vocabulary below), a public one of a `_pb2` module (a message), or a
    method the file defines on `self` or `servicer`; one is set only on `self`, `DESCRIPTOR` or `_globals[...]`,
    which are bound only as the generators bind them (`globals()`, `...AddSerializedFile(b"...")`), and only
    `_globals` is subscripted, by a string.
That bounds the file to protobuf's and gRPC's own calls; which messages and methods it describes is not checked
against the .proto (that would take protoc). Pure: no I/O.
"""

from __future__ import annotations

import ast
import builtins

STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
MAX_STUB_BYTES = 256 << 10  # vLLM 0.14.0's are 8 and 13 KB

# (module, name) -> the name the generators bind it to: `import grpc` is ("grpc", None) -> "grpc".
_IMPORTS = {
    ("grpc", None): "grpc",
    ("warnings", None): "warnings",
    ("google.protobuf", "descriptor"): "_descriptor",
    ("google.protobuf", "descriptor_pool"): "_descriptor_pool",
    ("google.protobuf", "runtime_version"): "_runtime_version",
    ("google.protobuf", "symbol_database"): "_symbol_database",
    ("google.protobuf", "message"): "_message",
    ("google.protobuf", "reflection"): "_reflection",
    ("google.protobuf.internal", "builder"): "_builder",
    ("grpc._utilities", "first_version_is_lower"): "first_version_is_lower",
}
_BUILTINS = {
    "globals",
    "RuntimeError",
    "NotImplementedError",
    "ImportError",
    "staticmethod",
    "object",
}
_EVERY_BUILTIN = frozenset(dir(builtins))
# Every attribute the generators read: protoc's Python output (protobuf 6 and 7), gRPC's plugin (1.76 and 1.85).
_ATTRIBUTES = {
    "Default", "AddSerializedFile", "ValidateProtobufRuntimeVersion", "Domain", "PUBLIC",
    "BuildMessageAndEnumDescriptors", "BuildTopDescriptorsAndMessages", "_USE_C_DESCRIPTORS", "_loaded_options",
    "_serialized_options", "_serialized_start", "_serialized_end", "_options",
    "__version__", "unary_unary", "unary_stream", "stream_unary", "stream_stream", "unary_unary_rpc_method_handler",
    "unary_stream_rpc_method_handler", "stream_unary_rpc_method_handler", "stream_stream_rpc_method_handler",
    "method_handlers_generic_handler", "add_generic_rpc_handlers", "add_registered_method_handlers", "experimental",
    "StatusCode", "UNIMPLEMENTED", "set_code", "set_details", "SerializeToString", "FromString", "warn",
}  # fmt: skip
_SET = {
    "_loaded_options",
    "_options",
    "_serialized_options",
    "_serialized_start",
    "_serialized_end",
}
_MODULE_STATEMENTS = (
    ast.Expr, ast.Import, ast.ImportFrom, ast.Assign, ast.If, ast.Try, ast.Raise, ast.ClassDef, ast.FunctionDef,
    ast.Pass,
)  # fmt: skip
_FUNCTION_STATEMENTS = (ast.Expr, ast.Assign, ast.Return, ast.Raise, ast.Pass)
_EXPRESSIONS = (
    ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.keyword, ast.Subscript, ast.BinOp, ast.Add, ast.UnaryOp,
    ast.Not, ast.JoinedStr, ast.FormattedValue, ast.Dict, ast.Tuple, ast.List, ast.Load, ast.Store, ast.arguments,
    ast.arg, ast.alias, ast.ExceptHandler,
)  # fmt: skip


class _Refused(Exception):
    def __init__(self, node: ast.AST | None, why: str):
        super().__init__(why)
        self.line, self.why = getattr(node, "lineno", "?"), why


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
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not Python ({type(exc).__name__})"
    try:
        _Stub(tree, path.rsplit("/", 1)[0].replace("/", ".")).check()
    except _Refused as refused:
        return f"{refused.why} (line {refused.line})"
    except RecursionError:
        return "nested deeper than a generated stub"
    return None


class _Stub:
    """One walk over a parsed stub: the statements where they may stand, then every expression."""

    def __init__(self, tree: ast.Module, package: str):
        self.tree, self.package = tree, package
        self.pb2: set[str] = set()  # the names `_pb2` modules are bound to
        self.methods = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        self.bound = set(_BUILTINS)

    def check(self) -> None:
        for node in ast.walk(self.tree):
            self._binding(node)
            if not isinstance(
                node,
                (ast.Module, *_MODULE_STATEMENTS, *_FUNCTION_STATEMENTS, *_EXPRESSIONS),
            ):
                raise _Refused(node, f"{type(node).__name__} is nothing protoc writes")
        self._statements(self.tree.body, _MODULE_STATEMENTS)
        for node in ast.walk(self.tree):
            self._expression(node)

    def _binding(self, node: ast.AST) -> None:
        """Every name the file binds, none a builtin's; an import only as the generators write it."""
        names: list[str] = []
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [self._import(node, alias) for alias in node.names]
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names = [node.id]
        for name in names:
            constructor = name == "__init__" and isinstance(node, ast.FunctionDef)  # the Stub's (a method: _class)
            if name in _EVERY_BUILTIN or (name.startswith("__") and not constructor):
                raise _Refused(node, f"a binding of the name {name!r}")
            self.bound.add(name)

    def _import(self, node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
        module = node.module if isinstance(node, ast.ImportFrom) else alias.name
        name = alias.name if isinstance(node, ast.ImportFrom) else None
        bound = alias.asname or (name or alias.name)
        sibling = isinstance(node, ast.ImportFrom) and node.level == 0 and bool(name) and str(name).endswith("_pb2")
        if sibling and module in (self.package, "google.protobuf") and not str(name).startswith("_"):
            self.pb2.add(bound)
            return bound
        if getattr(node, "level", 0) or _IMPORTS.get((module or "", name)) != bound:
            raise _Refused(node, f"an import from {module or '.'} of {alias.name} as {bound}")
        return bound

    def _statements(self, body: list[ast.stmt], allowed: tuple[type, ...], method: str | None = None) -> None:
        for node in body:
            if not isinstance(node, allowed):
                raise _Refused(node, f"a {type(node).__name__} statement where protoc writes none")
            if isinstance(node, ast.Assign):
                self._assign(node, method)
            elif isinstance(node, ast.Expr) and not isinstance(node.value, (ast.Constant, ast.Call)):
                raise _Refused(node, "an expression statement that is no call")
            elif isinstance(node, ast.Raise):
                self._raise(node)
            elif isinstance(node, ast.If):
                self._statements(node.body + node.orelse, allowed, method)
            elif isinstance(node, ast.Try):
                if node.orelse or node.finalbody or any(not _is(h.type, "ImportError") for h in node.handlers):
                    raise _Refused(node, "a try other than `except ImportError`")
                self._statements(
                    node.body + [s for h in node.handlers for s in h.body],
                    allowed,
                    method,
                )
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, ast.FunctionDef):
                self._function(node)

    def _class(self, node: ast.ClassDef) -> None:
        if node.keywords or node.decorator_list or any(not _is(base, "object") for base in node.bases):
            raise _Refused(node, f"the class {node.name!r} is not as the plugin writes one")
        for item in node.body:
            docstring = isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant)
            if not (docstring or isinstance(item, (ast.FunctionDef, ast.Pass))):
                raise _Refused(item, f"a {type(item).__name__} in the class {node.name!r}")
            if isinstance(item, ast.FunctionDef):
                self._function(item)

    def _function(self, node: ast.FunctionDef) -> None:
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise _Refused(node, f"the parameters of {node.name!r}")
        for default in args.defaults:
            if not (isinstance(default, ast.Constant) or (isinstance(default, ast.Tuple) and not default.elts)):
                raise _Refused(default, f"a default of {node.name!r} that is no constant")
        if any(not _is(d, "staticmethod") for d in node.decorator_list) or node.returns:
            raise _Refused(node, f"the definition of {node.name!r}")
        self._statements(node.body, _FUNCTION_STATEMENTS, node.name)

    def _assign(self, node: ast.Assign, method: str | None) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                if target.id == "_globals" and not _is_call(node.value, "globals"):
                    raise _Refused(node, "_globals bound to other than globals()")
                if target.id == "DESCRIPTOR" and not _adds_serialized_file(node.value):
                    raise _Refused(
                        node,
                        "DESCRIPTOR bound to other than a serialized file descriptor",
                    )
            elif isinstance(target, ast.Attribute):
                owner = target.value
                on_self = _is(owner, "self") and method == "__init__"
                on_descriptor = _is(owner, "DESCRIPTOR") or (
                    isinstance(owner, ast.Subscript) and _is(owner.value, "_globals")
                )
                if not (on_self or (on_descriptor and target.attr in _SET)):
                    raise _Refused(node, f"an assignment to {target.attr!r}")
            else:
                raise _Refused(node, f"an assignment to a {type(target).__name__}")

    def _raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if node.cause or not (
            isinstance(exc, ast.Call) and (_is(exc.func, "RuntimeError") or _is(exc.func, "NotImplementedError"))
        ):
            raise _Refused(node, "a raise of other than RuntimeError or NotImplementedError")

    def _expression(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in self.bound:
            raise _Refused(node, f"the name {node.id!r}, which the file does not bind")
        if isinstance(node, ast.keyword) and node.arg is None:
            raise _Refused(node, "a ** argument")
        if isinstance(node, ast.Subscript):
            key = node.slice
            string = isinstance(key, ast.Constant) and isinstance(key.value, str) and not key.value.startswith("__")
            if not (_is(node.value, "_globals") and string):
                raise _Refused(node, "a subscript other than _globals['<message>']")
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            message = owner in self.pb2 and not node.attr.startswith("_")
            method = owner in ("self", "servicer") and node.attr in self.methods
            if not (node.attr in _ATTRIBUTES or message or method):
                raise _Refused(node, f"the attribute {node.attr!r}")


def _is(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and _is(node.func, name) and not node.args and not node.keywords


def _adds_serialized_file(node: ast.AST) -> bool:
    """`_descriptor_pool.Default().AddSerializedFile(b'...')`, as protoc writes DESCRIPTOR."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "AddSerializedFile"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, bytes)
    )
