"""The gRPC stubs vLLM's build generates from its .proto (buildkit/image/grpcstubs.py): what grpcio-tools 1.76.0 and
1.85.1 write for vLLM 0.14.0's proto (tests/fixtures/grpc-stubs, as they generated it) passes the composition proof,
held to protoc's shape; each way a stub could carry other code fails, named."""

from __future__ import annotations

import pytest

from buildkit.image.grpcstubs import stub_of, stub_problem
from buildkit.image.vllmpackage import judge_package
from tests.support.paths import FIXTURES
from tests.support.vllmtree import blob_id
from tests.unit.image.test_vllm_python import GOOD, LISTED, SOURCE, WHEEL, package

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


def judged(stubs: dict[str, bytes]):
    listed = {**LISTED, "vllm/grpc/__init__.py": blob_id(b""), "vllm/grpc/vllm_engine.proto": blob_id(PROTO)}
    files = {**GOOD, "vllm/grpc/__init__.py": b"", "vllm/grpc/vllm_engine.proto": PROTO, **stubs}
    return judge_package(listed, package(files, None, WHEEL), SOURCE, WHEEL)


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
    ok, reason = judge_package(LISTED, package({**GOOD, **generated("1.85.1")}, None, WHEEL), SOURCE, WHEEL)
    assert ok is False and "are neither b17039bcc000's nor the wheel's: vllm/grpc/vllm_engine_pb2.py" in reason


EVIL = {
    "an import of os": (b"import os\n", "an import of another module (line"),
    "a builtin that runs code": (b"import grpc\nx = eval('1')\n", "the name 'eval', which the file does not define"),
    "a module's imports, through its attributes": (
        b"import grpc\ngrpc._channel.os.system('true')\n",
        "the attribute 'system'",
    ),
    "the builtins, through globals()": (
        b"_globals = globals()\n_globals['__builtins__']\n",
        "a subscript that is not a message's name",
    ),
    "a monkeypatch of grpc": (b"import grpc\ngrpc.unary_unary = None\n", "an assignment to 'unary_unary' of grpc"),
    "a lambda": (b"f = lambda: 0\n", "Lambda is nothing protoc writes"),
    "a loop": (b"for x in ():\n    pass\n", "For is nothing protoc writes"),
    "a decorator": (b"import grpc\n@grpc.experimental\ndef f():\n    pass\n", "the definition of 'f'"),
    "a catch-all": (b"try:\n    pass\nexcept Exception:\n    pass\n", "an except clause for other than ImportError"),
    "another vllm module": (b"from vllm.grpc import config\n", "an import from vllm.grpc"),
    "a relative import": (b"from . import vllm_engine_pb2\n", "an import from . (line"),
    "not Python": (b"def (\n", "not Python (SyntaxError)"),
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
