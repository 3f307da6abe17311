"""The gRPC stubs vLLM's build generates from its .proto (buildkit/image/grpcstubs.py): what grpcio-tools 1.76.0 and
1.85.1 write for vLLM 0.14.0's proto (tests/fixtures/grpc-stubs, as they generated it) passes the composition proof,
held to protoc's shape; each way a stub could carry other code fails, named."""

from __future__ import annotations

import tarfile

import pytest

from buildkit.image.grpcstubs import stub_of, stub_problem
from buildkit.image.vllmpackage import judge_package, read_package
from tests.support.images import F, layer_tar
from tests.support.paths import FIXTURES
from tests.support.vllmtree import blob_id

STUBS = FIXTURES / "grpc-stubs"
PROTO = b'syntax = "proto3";\npackage vllm.grpc.engine;\n'
GRPC = "vllm/grpc/vllm_engine_pb2_grpc.py"
PB2 = "vllm/grpc/vllm_engine_pb2.py"


def generated(version: str) -> dict[str, bytes]:
    return {
        PB2: (STUBS / version / "vllm_engine_pb2.py.txt").read_bytes(),
        GRPC: (STUBS / version / "vllm_engine_pb2_grpc.py.txt").read_bytes(),
        "vllm/grpc/vllm_engine_pb2.pyi": b"from google.protobuf import message as _message\n",
    }


SOURCE = "b17039bcc" + "0" * 31
GOOD = {"vllm/__init__.py": b"", "vllm/grpc/__init__.py": b"", "vllm/grpc/vllm_engine.proto": PROTO}
LISTED = {path: blob_id(data) for path, data in GOOD.items()}


def package(files: dict[str, bytes]):
    """read_package over a tar stream as `docker cp` sends one (tests/unit/image/test_vllm_python.py's shape)."""
    dirs = sorted({name.rsplit("/", 1)[0] for name in files if "/" in name} - set(files))
    entries = [F(d, kind=tarfile.DIRTYPE, mode=0o755) for d in dirs] + [F(n, d) for n, d in files.items()]
    return read_package([layer_tar(entries)], "/opt/nemo_rl_venv/lib/python3.12/site-packages/vllm", "image", {})


def judged(stubs: dict[str, bytes], listed: dict[str, str] = LISTED):
    return judge_package(listed, package({**GOOD, **stubs}), SOURCE, {})


@pytest.mark.parametrize("version", ["1.76.0", "1.85.1"])
def test_the_stubs_grpcio_tools_generates_pass_said_as_shape_checked(version):
    for name, data in generated(version).items():
        assert stub_problem(name, data) is None, name
    ok, reason = judged(generated(version))
    assert ok is True, reason
    assert "3 are gRPC stubs the build generated from vllm/grpc/vllm_engine.proto (held to protoc's shape" in reason


def test_a_stub_name_counts_only_beside_a_proto_of_the_source():
    sources = {"vllm/grpc/vllm_engine.proto"}
    assert stub_of(GRPC, sources) == "vllm/grpc/vllm_engine.proto"
    assert stub_of("vllm/grpc/other_pb2.py", sources) is None
    assert stub_of("vllm/grpc/vllm_engine.py", sources) is None
    ok, reason = judged(generated("1.85.1"), {p: b for p, b in LISTED.items() if not p.endswith(".proto")})
    assert ok is False and "nor the wheel's: vllm/grpc/vllm_engine.proto, vllm/grpc/vllm_engine_pb2.py," in reason


EVIL = {
    "an import of os": (b"import os\n", "an import from os of os as os"),
    "a builtin that runs code": (
        b"x = eval('1')\n",
        "the name 'eval', which the file does not bind",
    ),
    "a builtin's name bound by a parameter": (
        b"def _f(exec):\n    pass\nexec('1')\n",
        "a binding of the name 'exec'",
    ),
    "a default that runs code": (
        b"def _f(x=print('1')):\n    pass\n",
        "a default of '_f' that is no constant",
    ),
    "a builtin's name bound in a method": (
        b"class S:\n    def __init__(self, channel):\n        getattr = None\n",
        "a binding of the name 'getattr'",
    ),
    "a builtin's name bound in a class body": (
        b"class _X:\n    compile = None\n",
        "a binding of the name 'compile'",
    ),
    "the builtins, imported": (
        b"from warnings import __builtins__ as _b\n",
        "an import from warnings of __builtins__",
    ),
    "another module's import, aliased as a _pb2": (
        b"from grpc._channel import os as os_pb2\nos_pb2.system('id')\n",
        "an import from grpc._channel of os as os_pb2",
    ),
    "grpc's namespace as _globals": (
        b"from grpc import __dict__ as _globals\n",
        "an import from grpc of __dict__",
    ),
    "a module's imports, through its attributes": (
        b"import grpc\ngrpc._channel.os.system('true')\n",
        "the attribute 'system'",
    ),
    "the builtins, through globals()": (
        b"_globals = globals()\nx = _globals['__builtins__']\n",
        "a subscript other than _globals['<message>']",
    ),
    "_globals bound to a module": (
        b"import grpc\n_globals = grpc\n",
        "_globals bound to other than globals()",
    ),
    "a monkeypatch of grpc through DESCRIPTOR": (
        b"import grpc\nDESCRIPTOR = grpc\nDESCRIPTOR.unary_unary = None\n",
        "DESCRIPTOR bound to other than a serialized file descriptor",
    ),
    "a monkeypatch of grpc": (
        b"import grpc\ngrpc.unary_unary = None\n",
        "an assignment to 'unary_unary'",
    ),
    "a lambda": (b"f = lambda: 0\n", "Lambda is nothing protoc writes"),
    "a loop": (b"for x in ():\n    pass\n", "For is nothing protoc writes"),
    "a decorator": (
        b"import grpc\n@grpc.experimental\ndef f():\n    pass\n",
        "the definition of 'f'",
    ),
    "a catch-all": (
        b"try:\n    pass\nexcept Exception:\n    pass\n",
        "a try other than `except ImportError`",
    ),
    "another vllm module": (
        b"from vllm.grpc import config\n",
        "an import from vllm.grpc of config",
    ),
    "a relative import": (
        b"from . import vllm_engine_pb2\n",
        "an import from . of vllm_engine_pb2",
    ),
    "a class with a metaclass": (
        b"import grpc\nclass A(metaclass=grpc.M):\n    pass\n",
        "the class 'A'",
    ),
    "not Python": (b"def (\n", "not Python (SyntaxError)"),
    "nested past the parser": (
        b"x = 1\ny = " + b"x+" * 100000 + b"x\n",
        "not Python (RecursionError)",
    ),
}


@pytest.mark.parametrize("case", sorted(EVIL))
def test_a_stub_that_could_run_other_code_fails_named(case):
    code, said = EVIL[case]
    evil = generated("1.85.1")
    evil[GRPC] = evil[GRPC] + b"\n" + code
    assert said in (stub_problem(GRPC, evil[GRPC]) or ""), case
    ok, reason = judged(evil)
    assert (
        ok is False
        and "1 generated gRPC stub(s) are not what protoc writes: vllm/grpc/vllm_engine_pb2_grpc.py (" in reason
    )
