"""`buildkit build`: the buildx argv from the lock, --dry-run, and real smoke builds on the engine from
scripts/engine-up.sh (BuildKit built from its Go module, a loopback registry holding the stand-in base image)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import zipfile
from pathlib import Path

from buildkit.models.lock import read_lock
from buildkit.stages.verify import ENVIRONMENTS_CHECK, PYTHON_CHECK, WHEEL_ENV_CHECK
from tests.support.engine import STAND_IN_BASE
from tests.support.nemo_repo import use_remote
from tests.support.projects import interrupt_a_slow_smoke_build, push_to_engine_registry, smoke_project
from tests.support.realwheels import VLLM_0_14_0, real_wheel
from tests.support.vllmtree import listing

PACKAGE = "/opt/nemo-rl/3rdparty/vllm/vllm"  # build-custom-vllm.sh: an editable checkout in 3rdparty/vllm


def test_dry_run_prints_the_command_with_the_locked_values_and_changes_nothing(project, remote, tmp_path):
    root, cli = use_remote(project, remote)
    lock = json.loads((root / "pins.lock").read_text())
    result = cli("build", "--dry-run", "--builder", "mybuilder", "--", "--no-cache")
    assert result.code == 0, result.output
    assert "dry run: nothing is changed" in result.stderr and "is current, nothing to do" in result.stderr
    epoch, metadata_provenance, *words = shlex.split(result.stdout)
    assert epoch == "SOURCE_DATE_EPOCH=1770316331"  # the NeMo-RL commit time, 2026-02-05T18:32:11Z
    assert metadata_provenance == "BUILDX_METADATA_PROVENANCE=max"
    assert words[:5] == ["docker", "buildx", "build", "--builder", "mybuilder"]
    pairs = dict(zip(words[::1], words[1:], strict=False))
    assert pairs["--target"] == "release" and pairs["--platform"] == "linux/amd64"
    assert pairs["--tag"] == "nemo-rl:v0.5.0-spec-decode"
    tree = Path(lock["nemo_rl"]["commit"][:12])
    assert pairs["--build-context"].startswith("nemo-rl=") and pairs["--build-context"].endswith(f"nemo-rl-{tree}")
    args = [words[i + 1] for i, w in enumerate(words) if w == "--build-arg"]
    assert args == [
        "BUILD_CUSTOM_VLLM=1",
        f"BUILD_CUSTOM_VLLM_URL={lock['vllm']['repo']}",
        f"BUILD_CUSTOM_VLLM_REF={lock['vllm']['commit']}",
        f"BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION=/opt/vllm-wheel/{lock['wheel']['filename']}",
        f"NEMO_RL_COMMIT={lock['nemo_rl']['commit']}",
    ]
    assert "--provenance=mode=max" in words and "--metadata-file" in words
    assert pairs["--output"] == "type=docker,rewrite-timestamp=true"  # loaded into Docker, times clamped
    assert words[-2] == "--no-cache" and words[-1] == pairs["--build-context"].removeprefix("nemo-rl=")
    assert {p.name for p in (root / "build").glob("*")} <= {"resolve.json"}  # resolve's record, nothing built


def test_dry_run_without_a_lock_says_what_would_happen(project):
    root, cli = project
    result = cli("build", "--dry-run")
    assert result.code == 0, result.output
    assert "would resolve the pins" in result.stderr and "run `buildkit resolve` first" in result.stderr
    assert not (root / "pins.lock").exists()


def test_bad_builder_name_is_refused(project, remote, engine):
    root, cli = use_remote(project, remote)
    result = cli("build", "--smoke", "--builder", "x; rm -rf /")
    assert result.code == 2 and "--builder: expected a builder name" in result.stderr, result.output


def docker_inspect(ref: str) -> dict:
    done = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)[0]


def test_smoke_build_on_the_real_engine(project, remote, engine):
    root, cli = smoke_project(project, remote)
    lock = json.loads((root / "pins.lock").read_text())
    # As a new user runs it after scripts/engine-up.sh: no --builder (the engine's builder is selected) and no
    # --no-syntax (a smoke build needs no internet, so no `# syntax=` frontend image from Docker Hub).
    result = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert result.code == 0, result.output
    assert "=> [smoke" in result.stderr and "DONE" in result.stderr
    assert "syntax=" not in (root / "build" / "smoke" / "Dockerfile").read_text()
    rendered = json.loads((root / "build" / "smoke" / "render.json").read_text())
    assert rendered["smoke_base"].startswith(STAND_IN_BASE.rsplit(":", 1)[0] + "@sha256:") and not rendered["syntax"]

    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["outcome"] == "succeeded" and record["exit_code"] == 0 and record["smoke"]
    assert record["builder"] == engine and record["driver"] == "remote"
    assert record["buildkit_daemon_version"] == "v0.34.2"
    assert record["buildx_version"] == "v0.38.2" and record["metadata_provenance"]
    assert record["provenance"].startswith("not attached: --load into Docker's classic image store")
    assert record["argv"][:3] == ["docker", "buildx", "build"] and "--target" in record["argv"]
    assert record["steps_total"] > 3 and Path(record["log"]).exists()
    image = record["image"]
    assert image["tag"] == "nemo-rl:v0.5.0-spec-decode-smoke"
    assert image["digest"].startswith("sha256:") and image["config_digest"].startswith("sha256:")

    # The engine confirms the record: the loaded image is the one whose config digest buildx reported.
    inspected = docker_inspect(image["tag"])
    assert inspected["Id"] == image["config_digest"] == image["id"]
    # The smoke image starts from the stand-in base, which sets CUDA_VERSION like the CUDA images the lock checks.
    assert "CUDA_VERSION=12.9.1" in inspected["Config"]["Env"] and lock["cuda"]["outcome"] == "match"
    assert inspected["Size"] == image["size"] and len(inspected["RootFS"]["Layers"]) == image["layers"]
    labels = inspected["Config"]["Labels"]
    assert labels["org.opencontainers.image.revision"] == lock["nemo_rl"]["commit"]
    assert labels["buildkit.vllm.commit"] == lock["vllm"]["commit"]
    assert labels["buildkit.vllm.wheel"] == lock["wheel"]["url"]
    assert labels["buildkit.vllm.wheel.sha256"] == lock["wheel"]["sha256"]
    assert labels["org.opencontainers.image.created"] == "2026-02-05T18:32:11Z"
    env = dict(e.split("=", 1) for e in inspected["Config"]["Env"])
    assert env["NEMO_RL_COMMIT"] == lock["nemo_rl"]["commit"] and env["TORCH_CUDA_ARCH_LIST"] == "9.0"

    # What the build args and the applied patch put into the image.
    run = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            image["tag"],
            "sh",
            "-c",
            "cat /opt/nemo-rl/3rdparty/vllm/nemo-rl.env /opt/nemo_rl_container_fingerprint; "
            "sha256sum /opt/nemo-rl/tools/build-custom-vllm.sh",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    prepared = json.loads((root / "build" / "prepare.json").read_text())
    assert f"export VLLM_GIT_REF={lock['vllm']['commit']}" in run.stdout
    # The wheel the vllm-wheel stage fetched (BuildKit checked its sha256), mounted where the build args say.
    assert f"export VLLM_PRECOMPILED_WHEEL_LOCATION=/opt/vllm-wheel/{lock['wheel']['filename']}" in run.stdout
    assert prepared["patches"][0]["targets"][0]["after"] in run.stdout

    # A second build of the same inputs is served from the cache.
    again = cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--no-syntax", timeout=600)
    assert again.code == 0, again.output
    second = json.loads((root / "build" / "smoke-record.json").read_text())
    assert second["steps_cached"] >= 2 and second["image"]["config_digest"] == image["config_digest"]


def test_a_build_says_what_runs_again_against_the_last_one(project, remote, engine):
    """Before buildx starts, build and --dry-run compare the inputs this lock gives the steps with those the last
    build's record keeps (models/rebuild.py): here build.cuda_arch_list moves between two smoke builds."""
    root, cli = smoke_project(project, remote)
    first = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert first.code == 0, first.output
    assert "rebuild: no earlier build recorded in " in first.stderr
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    lock = json.loads((root / "pins.lock").read_text())
    kept = record["inputs"]
    assert (kept["vllm_commit"], kept["wheel_commit"], kept["nemo_rl_commit"], kept["cuda_arch_list"]) == (
        lock["vllm"]["commit"],
        lock["vllm_wheel"]["commit"],
        lock["nemo_rl"]["commit"],
        "9.0",
    )
    assert kept["base_image"] == json.loads((root / "build" / "smoke" / "render.json").read_text())["smoke_base"]

    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace('cuda_arch_list: "9.0"', 'cuda_arch_list: "9.0 10.0"'))
    assert cli("resolve").code == 0
    planned = cli("build", "--smoke", "--dry-run")
    assert planned.code == 0, planned.output
    moved = "  build.cuda_arch_list moved: 9.0 -> 9.0 10.0\n"
    steps = "runs again: the smoke target's RUN, which reads every input through its ARGs and ENVs"
    assert "  - rebuild: against the last build (succeeded, " in planned.stderr
    assert moved in planned.stderr and steps in planned.stderr
    again = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert again.code == 0, again.output
    assert "rebuild: against the last build (succeeded, " in again.stderr and moved in again.stderr
    assert json.loads((root / "build" / "smoke-record.json").read_text())["inputs"]["cuda_arch_list"] == "9.0 10.0"
    same = cli("build", "--smoke", "--dry-run")
    assert "rebuild: the lock is the one the last build (succeeded, " in same.stderr, same.output


def test_failing_smoke_build_records_the_failure(project, remote, engine):
    root, cli = smoke_project(project, remote)
    # An empty BUILD_CUSTOM_VLLM (a later --build-arg wins) fails the smoke step's check inside the build.
    result = cli(
        "build",
        "--smoke",
        "--builder",
        engine,
        "--progress",
        "plain",
        "--no-syntax",
        "--",
        "--build-arg",
        "BUILD_CUSTOM_VLLM=",
        timeout=600,
    )
    assert result.code == 6, result.output
    assert "the build failed" in result.stderr and "full log:" in result.stderr
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["outcome"] == "failed" and record["exit_code"] != 0 and "exit code: 1" in record["error"]
    assert record["image"]["digest"] is None


def test_ctrl_c_cancels_buildx_cleanly(tmp_path, engine):
    """Ctrl-C while buildx runs: buildx is asked to cancel, and the run reports itself interrupted."""
    from buildkit.models.plan import BuildPlan
    from buildkit.stages.build import run_buildx

    (tmp_path / "Dockerfile").write_text(f"FROM {STAND_IN_BASE}\nRUN echo started-slow-step && sleep 60\n")
    plan = BuildPlan(
        dockerfile=tmp_path / "Dockerfile",
        tree=tmp_path,
        target="",
        platform="linux/amd64",
        tag="interrupt:1",
        build_args=(),
        metadata_file=tmp_path / "metadata.json",
        source_date_epoch=0,
        builder=engine,
        provenance=False,
        extra=("--no-cache",),
    )

    def interrupt_when_slow_step_runs(line, progress):
        if any(step.name.startswith("[2/2] RUN") and step.running for step in progress.steps.values()):
            raise KeyboardInterrupt

    started = time.monotonic()
    result = run_buildx(plan, tmp_path / "build.log", interrupt_when_slow_step_runs)
    assert result.interrupted and result.exit_code != 0
    assert time.monotonic() - started < 40, "buildx stopped long before the step's 60 s"
    assert "interrupted (Ctrl-C)" in (tmp_path / "build.log").read_text()


def test_smoke_push_attaches_provenance_and_the_registry_confirms_the_digest(project, remote, engine):
    root, cli = smoke_project(project, remote)
    text = (root / "pins.yaml").read_text().replace("tag: nemo-rl:", "tag: 127.0.0.1:5000/test/nemo-rl:")
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0
    result = cli(
        "build",
        "--smoke",
        "--push",
        "--builder",
        engine,
        "--progress",
        "plain",
        "--no-syntax",
        timeout=600,
    )
    assert result.code == 0, result.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["provenance"] == "attached (mode=max)"
    assert "type=image,push=true,rewrite-timestamp=true" in record["argv"]
    digest = record["image"]["digest"]
    manifest = subprocess.run(
        [
            "curl",
            "-fsS",
            "-H",
            "Accept: application/vnd.oci.image.index.v1+json",
            "http://127.0.0.1:5000/v2/test/nemo-rl/manifests/v0.5.0-spec-decode-smoke",
            "-o",
            "/dev/null",
            "-w",
            "%header{docker-content-digest}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert manifest == digest
    index = json.loads(
        subprocess.run(
            [
                "curl",
                "-fsS",
                "-H",
                "Accept: application/vnd.oci.image.index.v1+json",
                f"http://127.0.0.1:5000/v2/test/nemo-rl/manifests/{digest}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    kinds = [m.get("annotations", {}).get("vnd.docker.reference.type") for m in index["manifests"]]
    assert "attestation-manifest" in kinds


def test_ctrl_c_on_the_cli_records_the_build_as_interrupted(project, remote, engine):
    root, cli = smoke_project(project, remote)
    code, rest = interrupt_a_slow_smoke_build(root, cli.env, engine, signal.SIGINT)
    assert code == 130, rest
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["outcome"] == "interrupted"
    assert "interrupted (Ctrl-C)" in Path(record["log"]).read_text()


def test_live_view_on_a_terminal(project, remote, engine):
    """On a terminal (a real pty here) `auto` picks the live view: counts, elapsed time, running steps."""
    import pty
    import sys

    root, cli = smoke_project(project, remote)
    leader, follower = pty.openpty()
    env = {k: v for k, v in cli.env.items() if k != "NO_COLOR"}
    process = subprocess.Popen(
        [sys.executable, "-m", "buildkit.cli", "build", "--smoke", "--builder", engine, "--no-syntax"],
        cwd=root,
        env={**env, "TERM": "xterm"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    assert process.wait(timeout=300) == 0, screen.decode(errors="replace")[-2000:]
    os.close(leader)
    text = screen.decode(errors="replace")
    assert "target smoke" in text and "steps done" in text and "cached" in text
    assert "\x1b[" in text, "the live view draws with terminal control sequences"
    assert json.loads((root / "build" / "smoke-record.json").read_text())["outcome"] == "succeeded"


def test_verify_the_smoke_image(project, remote, engine):
    root, cli = smoke_project(project, remote)
    assert cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--no-syntax", timeout=600).code == 0
    result = cli("verify", "--json")
    assert result.code == 0, result.output
    record = json.loads(result.stdout)
    assert record["smoke"] and record["image"] == "nemo-rl:v0.5.0-spec-decode-smoke"
    status = {r["name"]: r["status"] for r in record["results"]}
    assert status == {
        "vllm version names the locked commit": "skip",
        "sglang is not importable": "skip",
        "NEMO_RL_COMMIT matches the lock": "pass",
        "labels match the lock": "pass",
        WHEEL_ENV_CHECK: "pass",
        "container fingerprint exists": "pass",
        "patched tools/build-custom-vllm.sh is the recorded one": "pass",
        PYTHON_CHECK: "skip",  # a smoke image holds no vLLM (issue 28)
        "a GPU of compute capability 9.0, and its kernels": "skip",
        "GPU kernels, ABI and drivers": "skip",  # a smoke image holds no vLLM (issue 23)
        ENVIRONMENTS_CHECK: "skip",  # nor a Python environment (issue 40)
    }
    assert json.loads((root / "build" / "verify.json").read_text()) == record

    # The report after the smoke build picks the same record verify did (the newest), and says so; its
    # components, digest, command and verification all come from the records.
    report = cli("report")
    assert report.code == 0, report.output
    assert "build record: build/smoke-record.json" in report.stderr and "Nothing has been built" not in report.stdout
    assert "From the build record `build/smoke-record.json`." in report.stdout
    built = json.loads((root / "build" / "smoke-record.json").read_text())
    assert f"| Digest | `{built['image']['digest']}` |" in report.stdout
    assert built["command"] in report.stdout
    assert "| NEMO\\_RL\\_COMMIT matches the lock | pass |" in report.stdout  # markdown-escaped
    assert "````diff\n--- upstream docker/Dockerfile" in report.stdout, "build/smoke/render.json holds the diff"

    # A label that no longer matches the lock is caught.
    tampered = root / "tampered"
    tampered.mkdir()
    (tampered / "Dockerfile").write_text("FROM nemo-rl:v0.5.0-spec-decode-smoke\nLABEL buildkit.vllm.commit=0000000\n")
    subprocess.run(["docker", "build", "-q", "-t", "tampered:1", str(tampered)], check=True, capture_output=True)
    bad = cli("verify", "tampered:1")
    assert bad.code == 1 and "FAIL  labels match the lock: buildkit.vllm.commit=0000000" in bad.stderr, bad.output


def test_verify_vllm_and_sglang_checks_run_in_the_image(project, remote, engine):
    """The Python checks, on images built from the smoke image with a stand-in `python` (the smoke base has none):
    one that reports the locked vLLM build and lacks sglang, one that reports another commit and has sglang."""
    root, cli = smoke_project(project, remote)
    # A stand-in python, not vLLM: these images hold no vLLM library, so the pins require none (issue 23: a release
    # image without a required library fails verify, as tests/unit/stages/test_verify_checks.py shows).
    pins = (root / "pins.yaml").read_text()
    arch = '  cuda_arch_list: "9.0"'
    assert arch in pins
    (root / "pins.yaml").write_text(pins.replace(arch, f"{arch}\n  gpu_required: []"))
    assert cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--no-syntax", timeout=600).code == 0
    variants = {
        "good": ("0.14.0rc2.dev156+g4a5299c93", 'echo "ModuleNotFoundError: No module named sglang" >&2; exit 1'),
        "bad": ("0.14.0rc2.dev155+g0123456789", "exit 0"),
    }
    # vLLM's package where build-custom-vllm.sh leaves it (an editable checkout), with vLLM 0.14.0's real Python
    # files from its source: the stand-in GitHub lists that release's tree for the locked commit
    # (tests/support/vllmtree.py), and the members precompiled mode takes from the wheel beside them (the stand-in
    # wheel's, as the lock lists them). The bad image's copy of one is edited.
    with zipfile.ZipFile(real_wheel(VLLM_0_14_0)) as wheel:
        real = {name: wheel.read(name) for name in listing()}
    from_wheel = read_lock(root / "pins.lock").vllm_files or {}
    assert from_wheel, "resolve lists the wheel's members precompiled mode takes"
    downloaded = next((root / "cache").rglob("vllm-*.whl"))  # the project's BUILDKIT_CACHE_DIR (tests/conftest.py)
    with zipfile.ZipFile(downloaded) as wheel:
        real.update({name: wheel.read(name) for name in from_wheel})
    for name, (version, sglang) in variants.items():
        ctx = root / f"python-{name}"
        for path, data in real.items():
            (ctx / path).parent.mkdir(parents=True, exist_ok=True)
            (ctx / path).write_bytes(data + (b"# edited\n" if name == "bad" and path == "vllm/envs.py" else b""))
        (ctx / "python").write_text(
            f'#!/bin/sh\ncase "$2" in\n  *"import vllm"*) echo "{version}" ;;\n  *"import sglang"*) {sglang} ;;\n'
            f"  *\"find_spec('vllm')\"*) echo {PACKAGE} ;;\nesac\n"
        )
        (ctx / "Dockerfile").write_text(
            "FROM nemo-rl:v0.5.0-spec-decode-smoke\nCOPY python /bin/python\nRUN chmod 0755 /bin/python\n"
            f"COPY vllm {PACKAGE}\nLABEL buildkit.smoke=false\n"
        )
        # Docker's own builder (the image to build on is in the engine, not in a registry), with no network: the
        # engine here has no bridge.
        subprocess.run(
            ["docker", "build", "--network", "none", "-q", "-t", f"pycheck:{name}", str(ctx)],
            check=True,
            capture_output=True,
        )
    good = cli("verify", "pycheck:good", "--json")
    assert good.code == 0, good.output
    status = {r["name"]: (r["status"], r["reason"]) for r in json.loads(good.stdout)["results"]}
    assert status["vllm version names the locked commit"][0] == "pass"
    assert status["sglang is not importable"] == ("pass", "import sglang fails: ModuleNotFoundError")
    python = status[PYTHON_CHECK]
    assert python == (
        "pass",
        f"1186 file(s) are 4a5299c93ff9's (git blob ids), and nothing else is there; {len(from_wheel)} are the "
        "locked wheel's members (sha256)",
    )
    bad = cli("verify", "pycheck:bad")
    assert bad.code == 1, bad.output
    assert "FAIL  vllm version names the locked commit: vllm.__version__ = 0.14.0rc2.dev155+g0123456789" in bad.stderr
    assert "FAIL  sglang is not importable: import sglang succeeded" in bad.stderr
    assert f"FAIL  {PYTHON_CHECK}: 1 differ from 4a5299c93ff9's: vllm/envs.py" in bad.stderr


def test_verify_gpus_on_an_engine_without_gpus_fails_and_says_why(project, remote, engine):
    root, cli = smoke_project(project, remote)
    assert cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--no-syntax", timeout=600).code == 0
    result = cli("verify", "--gpus")
    assert result.code == 1, result.output
    assert "FAIL  a GPU of compute capability 9.0, and its kernels" in result.stderr


def test_verify_follows_the_lock_not_one_build(project, remote, engine):
    """Another lock than the reference one: two patches (every patched file is checked, by the smoke stage inside
    the build and by verify) and cuda_arch_list "9.0 10.0" (the GPU check asks for one of those)."""
    root, cli = project
    (root / "patches" / "research-readme.patch").write_text(
        "diff --git a/research/README.md b/research/README.md\n--- a/research/README.md\n+++ b/research/README.md\n"
        "@@ -1 +1,2 @@\n research\n+patched by a second declared patch\n"
    )
    text = (root / "pins.yaml").read_text().replace('cuda_arch_list: "9.0"', 'cuda_arch_list: "9.0 10.0"')
    text = text.replace(
        "\nvllm:\n",
        "    - file: patches/research-readme.patch\n      reason: a second patched file\n\nvllm:\n",
    )
    (root / "pins.yaml").write_text(text)
    root, cli = smoke_project(project, remote)
    built = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    assert "sha256sum -c" in (root / "build" / "smoke" / "Dockerfile").read_text()
    result = cli("verify", "--gpus", "--json")
    assert result.code == 1, result.output
    status = {r["name"]: r["status"] for r in json.loads(result.stdout)["results"]}
    assert status["patched tools/build-custom-vllm.sh is the recorded one"] == "pass"
    assert status["patched research/README.md is the recorded one"] == "pass"
    assert status["a GPU of compute capability 9.0 or 10.0, and its kernels"] == "fail"


def test_a_push_then_a_load_of_the_same_lock_then_verify_and_report_speak_of_one_build(project, remote, engine):
    """Issue 41's one identity, in the order a user may take: the smoke image pushed, then the same lock built
    again with --load; verify checks the loaded image (the newest build), its record is named by that build's
    identity, and the report takes it as this build's, not another's."""
    root, cli = smoke_project(project, remote)
    push_to_engine_registry(root, "sequence")
    pushed = cli("build", "--smoke", "--push", "--progress", "plain", timeout=600)
    assert pushed.code == 0, pushed.output
    first = json.loads((root / "build" / "smoke-record.json").read_text())
    loaded = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert loaded.code == 0, loaded.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert (
        record["lock_sha256"] == first["lock_sha256"] and record["image"]["id"] and "push=true" not in record["command"]
    )
    verified = cli("verify", timeout=600)
    assert verified.code == 0, verified.output
    header = json.loads((root / "build" / "verify.json").read_text())["header"]
    identities = {record["image"][k] for k in ("digest", "id", "config_digest")} - {None}
    assert header["image"] in identities or identities & set(header["aliases"]), (header, identities)
    report = cli("report")
    assert report.code == 0, report.output
    assert "a record of another build" not in report.stderr and "not run on this image" not in report.stdout
