"""The gRPC stubs vLLM's build generates from its .proto (buildkit/image/grpcstubs.py): what grpcio-tools 1.76.0 and
1.85.1 write (buildkit/image/grpc-reference, as they generated it) passes the composition proof, held to the
generators' statements; each way a stub could carry other code fails, named by its line. The cases are the bypasses
two adversarial reviews built against earlier checks, each shown running code when imported."""

from __future__ import annotations

import tarfile

import pytest

from buildkit.image.grpcstubs import REFERENCE, stub_of, stub_problem
from buildkit.image.vllmpackage import judge_package, read_package
from tests.support.images import F, layer_tar
from tests.support.vllmtree import blob_id

PROTO = b'syntax = "proto3";\npackage vllm.grpc.engine;\n'
GRPC = "vllm/grpc/vllm_engine_pb2_grpc.py"
PB2 = "vllm/grpc/vllm_engine_pb2.py"


def generated(version: str, stem: str = "vllm_engine") -> dict[str, bytes]:
    return {
        f"vllm/grpc/{stem}_pb2.py": (REFERENCE / f"{version}-{stem}_pb2.py.txt").read_bytes(),
        f"vllm/grpc/{stem}_pb2_grpc.py": (REFERENCE / f"{version}-{stem}_pb2_grpc.py.txt").read_bytes(),
        f"vllm/grpc/{stem}_pb2.pyi": b"from google.protobuf import message as _message\n",
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
    for stem in ("vllm_engine", "kinds"):  # kinds: client- and bidirectional streaming, an enum, a map
        for name, data in generated(version, stem).items():
            assert stub_problem(name, data) is None, name
    ok, reason = judged(generated(version))
    assert ok is True, reason
    assert (
        "3 are gRPC stubs the build generated from vllm/grpc/vllm_engine.proto (held to the statements gRPC's "
        "generators write" in reason
    )


def test_a_stub_name_counts_only_beside_a_proto_of_the_source():
    sources = {"vllm/grpc/vllm_engine.proto"}
    assert stub_of(GRPC, sources) == "vllm/grpc/vllm_engine.proto"
    assert stub_of("vllm/grpc/other_pb2.py", sources) is None
    assert stub_of("vllm/grpc/vllm_engine.py", sources) is None
    ok, reason = judged(generated("1.85.1"), {p: b for p, b in LISTED.items() if not p.endswith(".proto")})
    assert ok is False and "nor the wheel's: vllm/grpc/vllm_engine.proto, vllm/grpc/vllm_engine_pb2.py," in reason


EVIL = {
    # the first review's
    "an import of os": b"import os\n",
    "a builtin that runs code": b"x = eval('1')\n",
    "a builtin's name bound by a parameter": b"def _f(exec):\n    pass\nexec('1')\n",
    "a default that runs code": b"def _f(x=print('1')):\n    pass\n",
    "a builtin's name bound in a method": b"class S:\n    def __init__(self, channel):\n        getattr = None\n",
    "a builtin's name bound in a class body": b"class _X:\n    compile = None\n",
    "the builtins, imported": b"from warnings import __builtins__ as _b\n_b['exec']('1')\n",
    "another module's import, aliased as a _pb2": b"from grpc._channel import os as os_pb2\nos_pb2.system('id')\n",
    "grpc's namespace as _globals": b"from grpc import __dict__ as _globals\n",
    "a module's imports, through its attributes": b"import grpc\ngrpc._channel.os.system('true')\n",
    "the builtins, through globals()": b"_globals = globals()\nx = _globals['__builtins__']\n",
    "a monkeypatch of grpc through DESCRIPTOR": b"import grpc\nDESCRIPTOR = grpc\nDESCRIPTOR.unary_unary = None\n",
    "a monkeypatch of grpc": b"import grpc\ngrpc.unary_unary = None\n",
    "a lambda": b"f = lambda: 0\n",
    "a loop": b"for x in ():\n    pass\n",
    "a decorator": b"import grpc\n@grpc.experimental\ndef f():\n    pass\n",
    "a catch-all": b"try:\n    pass\nexcept Exception:\n    pass\n",
    "another vllm module": b"from vllm.grpc import config\n",
    "a relative import": b"from . import vllm_engine_pb2\n",
    "a class with a metaclass": b"import grpc\nclass A(metaclass=grpc.M):\n    pass\n",
    # the second review's: names that stood for what the generators bind to them, bound to something else
    "self bound to a module, methods named as its attributes": (
        b"class _N(object):\n    def sys(self): pass\n    def modules(self): pass\nself = grpc\nself = self.sys\n"
    ),
    "a _pb2 module's name rebound": (
        b"from google.protobuf import any_pb2 as m_pb2\nm_pb2 = _descriptor\nm_pb2 = m_pb2.os\nm_pb2.system('x')\n"
    ),
    "the sibling _pb2 module's name rebound": b"vllm_dot_grpc_dot_vllm__engine__pb2 = grpc\n",
    "a module-level __init__ setting grpc's attributes": (
        b"self = grpc\ndef __init__():\n    self.insecure_channel = None\n__init__()\n"
    ),
    "DESCRIPTOR and _globals as parameters": (
        b"def _mark(DESCRIPTOR, _globals):\n    DESCRIPTOR._options = _globals['grpc']\n_mark(warnings, globals())\n"
    ),
    "a network call at import": b"grpc.experimental.unary_unary(b'x', 'unix:/tmp/s', '/x/y', insecure=True)\n",
    "not Python": b"def (\n",
    "nested past the parser": b"x = 1\ny = " + b"x+" * 100000 + b"x\n",
}


@pytest.mark.parametrize("case", sorted(EVIL))
@pytest.mark.parametrize("stub", ["vllm_engine_pb2_grpc.py", "vllm_engine_pb2.py"])
def test_a_stub_that_could_run_other_code_fails_named(case, stub):
    name = f"vllm/grpc/{stub}"
    evil = generated("1.85.1")
    evil[name] = evil[name] + b"\n" + EVIL[case]
    said = stub_problem(name, evil[name]) or ""
    assert said.endswith("is no statement gRPC's generators write there") or said.startswith("not Python"), case
    ok, reason = judged(evil)
    assert ok is False and f"1 generated gRPC stub(s) are not what protoc writes: {name} (" in reason


def descriptor(file_name: str, *messages: str) -> bytes:
    """A FileDescriptorProto in protobuf's wire format: its name (field 1) and top-level messages (field 4)."""

    def field(number: int, data: bytes) -> bytes:
        assert len(data) < 128
        return bytes([number << 3 | 2, len(data)]) + data

    return field(1, file_name.encode()) + b"".join(field(4, field(1, m.encode())) for m in messages)


def with_descriptor(data: bytes) -> bytes:
    """The 1.85.1 reference _pb2 stub with its serialized descriptor replaced."""
    text = generated("1.85.1")[PB2]
    start = text.index(b"AddSerializedFile(") + len(b"AddSerializedFile(")
    return text[:start] + repr(data).encode() + text[text.index(b")", text.index(b"'\n", start) - 2) :]


# The third review's: reference statements with a constant or a name that the generators' own never is.
CHANGED = {
    "messages whose module is another (pickle imports it)": (
        PB2,
        lambda t: t.replace(b"'vllm.grpc.vllm_engine_pb2'", b"'unittest.__main__'"),
        "is no statement",
    ),
    "an attribute set on another module through _globals": (
        PB2,
        lambda t: t.replace(b"_globals['_SAMPLINGPARAMS']._serialized_start", b"_globals['grpc']._serialized_start"),
        "is no statement",
    ),
    "a statement the generators write once, twice": (
        PB2,
        lambda t: t.replace(b"_globals = globals()", b"_globals = globals()\n_globals = globals()"),
        "repeats a statement the generators write once",
    ),
    "the sibling module imported as __builtins__": (
        GRPC,
        lambda t: t.replace(b"as vllm_dot_grpc_dot_vllm__engine__pb2", b"as __builtins__"),
        "is no statement",
    ),
    "a class named __getattr__": (GRPC, lambda t: t.replace(b"class VllmEngine:", b"class __getattr__:"), "is no"),
    "a descriptor of another file": (
        PB2,
        lambda t: with_descriptor(descriptor("google/protobuf/struct.proto", "Struct")),
        "adds a descriptor of 'google/protobuf/struct.proto', not of vllm/grpc/vllm_engine.proto",
    ),
    "a message named as a name the module's code reads": (
        PB2,
        lambda t: with_descriptor(descriptor("vllm/grpc/vllm_engine.proto", "Fine", "_builder", "DESCRIPTOR")),
        "adds a descriptor whose names shadow the module's: DESCRIPTOR, _builder",
    ),
    "a descriptor that is not protobuf's wire format": (
        PB2,
        lambda t: with_descriptor(b"\x0a\x7fshort"),
        "not Python the generators write (ValueError)",
    ),
}


@pytest.mark.parametrize("case", sorted(CHANGED))
def test_a_generated_statement_bent_to_another_end_fails_named(case):
    name, change, said = CHANGED[case]
    stub = change(generated("1.85.1")[name])
    assert stub != generated("1.85.1")[name], case
    assert said in (stub_problem(name, stub) or ""), (case, stub_problem(name, stub))


def test_the_reference_descriptor_is_read_and_a_crafted_one_passes_when_it_names_nothing_odd():
    assert stub_problem(PB2, with_descriptor(descriptor("vllm/grpc/vllm_engine.proto", "Fine", "AlsoFine"))) is None
