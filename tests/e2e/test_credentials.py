"""Private registries: `resolve`, `doctor` and `verify` log in with Docker's credentials (config.json's auths,
credsStore and credHelpers through a real credential helper, DOCKER_CONFIG honoured), against a loopback registry
that demands a login, and no credential ever appears in output, the lock or any file buildkit writes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from buildkit.errors import CredentialsError
from buildkit.world.credentials import Credential, DockerConfig, lookup
from tests.support.dockerconfig import (
    HELPER,
    IDENTITY_TOKEN,
    PASSWORD,
    USERNAME,
    basic,
    env_for,
    helper_calls,
    secret_forms,
    write_config,
    write_helper,
)
from tests.support.engine import STAND_IN_BASE
from tests.support.failures import OLD_LOCK, assert_failed, assert_untouched
from tests.support.fake_upstreams import BASE_REPO, BASE_TAG, Login

VARIANTS = {
    "auths-basic-token-flow": ("token", lambda reg, tmp: {"auths": {reg: {"auth": basic()}}}),
    "auths-basic-registry": ("basic", lambda reg, tmp: {"auths": {reg: {"auth": basic()}}}),
    "auths-identitytoken": ("token", lambda reg, tmp: {"auths": {reg: {"identitytoken": IDENTITY_TOKEN}}}),
    "credsStore": ("token", lambda reg, tmp: {"auths": {reg: {}}, "credsStore": HELPER}),
    # credHelpers wins over credsStore: the store named here is not even installed.
    "credHelpers": ("basic", lambda reg, tmp: {"credsStore": "buildkit-absent", "credHelpers": {reg: HELPER}}),
    "credHelpers-identity": ("token", lambda reg, tmp: {"credHelpers": {reg: HELPER}}),
}


def private(upstreams, mode: str, *, password: str = PASSWORD) -> str:
    """The fake registry demands a login from now on; its host, as the base image names it."""
    upstreams.registry.login = Login(mode, USERNAME, password, identity_token=IDENTITY_TOKEN)
    return upstreams.registry.netloc


def setup(root: Path, registry: str, variant: str) -> dict[str, str]:
    """The variant's DOCKER_CONFIG (and helper, answering for `registry`): the environment to run buildkit with."""
    _, make = VARIANTS[variant]
    answer = ["<token>", IDENTITY_TOKEN] if variant.endswith("identity") else [USERNAME, PASSWORD]
    bin_dir = write_helper(root / "helper-bin", {registry: answer})
    return env_for(write_config(root / "docker-config", make(registry, root)), bin_dir)


def authorizations(log, prefix: str) -> list[str | None]:
    return [headers.get("Authorization") for _, path, headers in log if path.startswith(prefix)]


def assert_no_secret(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for form in secret_forms(PASSWORD, IDENTITY_TOKEN):
            assert form not in text, f"a credential ({form[:4]}...) in {where}"


def files_buildkit_wrote(root: Path) -> dict[str, str]:
    """Every file under the project (lock, cache, build dir), but the inputs that hold the secrets on purpose."""
    inputs = (root / "docker-config", root / "helper-bin")
    return {
        str(path): path.read_bytes().decode("latin-1")
        for path in root.rglob("*")
        if path.is_file() and not any(path.is_relative_to(d) for d in inputs)
    }


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_resolve_logs_in_with_each_kind_of_credential(project, upstreams, variant):
    root, cli = project
    mode = VARIANTS[variant][0]
    registry = private(upstreams, mode)
    result = cli("resolve", "--json", env=setup(root, registry, variant))
    assert result.code == 0, result.output
    lock = json.loads(result.stdout)
    assert lock["base_image"]["index_digest"] == upstreams.registry.tags[(BASE_REPO, BASE_TAG)]
    log = upstreams.registry.log
    v2 = [a for a in authorizations(log, "/v2/") if a]
    if mode == "basic":
        assert v2 and set(v2) == {f"Basic {basic()}"}
    else:
        # The registry itself only ever sees the bearer token; the credentials went to its token realm.
        assert v2 and all(a.startswith("Bearer ") for a in v2)
        if "identity" in variant:
            assert [m for m, p, _ in log if p.startswith("/token")] == ["POST"]  # the OAuth2 form, no GET
            [(_, body)] = upstreams.registry.bodies
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            assert form["grant_type"] == "refresh_token" and form["refresh_token"] == IDENTITY_TOKEN
            assert form["client_id"] == "buildkit" and form["scope"] == f"repository:{BASE_REPO}:pull"
        else:
            [(path, headers)] = [(p, h) for m, p, h in log if p.startswith("/token")]
            assert headers["Authorization"] == f"Basic {basic()}"
            assert parse_qs(urlsplit(path).query)["account"] == [USERNAME]
    if "cred" in variant:
        assert helper_calls(root / "helper-bin") == [f"get {registry}"]  # asked once, for this host
    assert_no_secret({"stdout": result.stdout, "stderr": result.stderr, **files_buildkit_wrote(root)})


@pytest.mark.parametrize(
    ("variant", "needle"),
    [
        ("auths-basic-token-flow", "token endpoint 127.0.0.1:{port} answered 401"),
        ("auths-identitytoken", "token endpoint 127.0.0.1:{port} answered 400"),
        ("auths-basic-registry", "the manifest answered 401 to the login"),
        ("credHelpers", "the manifest answered 401 to the login"),
    ],
)
def test_a_refused_login_is_one_clear_error_and_the_lock_stays(project, upstreams, variant, needle):
    root, cli = project
    (root / "pins.lock").write_bytes(OLD_LOCK)
    mode = VARIANTS[variant][0]
    registry = private(upstreams, mode, password="another-password")
    upstreams.registry.login.identity_token = "another-identity-token"
    result = cli("resolve", env=setup(root, registry, variant))
    port = registry.rsplit(":", 1)[1]
    assert_failed(result, 5, f"registry {registry} refused the login", needle.format(port=port))
    assert f"docker login {registry}" in result.stderr
    assert str(root / "docker-config" / "config.json") in result.stderr  # where the credentials came from
    # The error and its hint (and the note that the old, invalid lock would be replaced by a resolve that worked).
    assert len([line for line in result.stderr.splitlines() if not line.startswith("note:")]) == 2
    assert_untouched(root / "pins.lock")
    assert_no_secret({"stderr": result.stderr, **files_buildkit_wrote(root)})
    # Not retried: a refused login would only be refused again.
    assert len([p for _, p, _ in upstreams.registry.log if p.startswith("/token")]) <= 1


def test_a_missing_helper_is_one_clear_error(project, upstreams):
    root, cli = project
    (root / "pins.lock").write_bytes(OLD_LOCK)
    registry = private(upstreams, "token")
    config = write_config(root / "docker-config", {"auths": {registry: {}}, "credsStore": "buildkit-missing"})
    result = cli("resolve", env=env_for(config))
    assert_failed(
        result, 5, "docker-credential-buildkit-missing is not installed or not on PATH", f"credsStore in {config}"
    )
    assert "install docker-credential-buildkit-missing" in result.stderr
    assert_untouched(root / "pins.lock")
    assert not [p for _, p, _ in upstreams.registry.log if p.startswith("/token")], "no login attempted"


def test_a_failing_helper_is_one_clear_error(project, upstreams):
    root, cli = project
    registry = private(upstreams, "token")
    bin_dir = write_helper(root / "helper-bin", {registry: "fail"})
    config = write_config(root / "docker-config", {"credHelpers": {registry: HELPER}})
    result = cli("resolve", env=env_for(config, bin_dir))
    assert_failed(result, 5, f"docker-credential-{HELPER} get failed for {registry} (exit 1)", "keyring is locked")


def test_a_helper_without_an_entry_falls_back_to_anonymous(project, upstreams):
    """The protocol's "credentials not found" is no error: a public image needs none (Docker does the same)."""
    root, cli = project
    bin_dir = write_helper(root / "helper-bin", {"elsewhere.example:5000": [USERNAME, PASSWORD]})
    config = write_config(root / "docker-config", {"credsStore": HELPER})
    result = cli("resolve", "--json", env=env_for(config, bin_dir))
    assert result.code == 0, result.output
    assert helper_calls(bin_dir) == [f"get {upstreams.registry.netloc}"]
    assert set(authorizations(upstreams.registry.log, "/token")) == {None}  # the anonymous token flow


def test_docker_config_is_honoured_and_is_the_only_place_looked_at(project, upstreams, tmp_path):
    root, cli = project
    registry = private(upstreams, "basic")
    home = tmp_path / "home"
    write_config(home / ".docker", {"auths": {registry: {"auth": basic(USERNAME, "the-wrong-one")}}})
    right = write_config(root / "docker-config", {"auths": {registry: {"auth": basic()}}})
    assert cli("resolve", env={"HOME": str(home), **env_for(right)}).code == 0
    # Without DOCKER_CONFIG, ~/.docker/config.json is read: its wrong password is refused.
    (root / "pins.lock").unlink()
    wrong = cli("resolve", env={"HOME": str(home), "DOCKER_CONFIG": ""})
    assert_failed(wrong, 5, "refused the login", str(home / ".docker" / "config.json"))
    # DOCKER_CONFIG naming a directory with no config: no credentials, and no falling back to ~/.docker.
    empty = tmp_path / "empty"
    empty.mkdir()
    none = cli("resolve", env={"HOME": str(home), "DOCKER_CONFIG": str(empty)})
    assert_failed(none, 3, f"registry {registry} wants a login (Basic)", f"docker login {registry}")


def test_credentials_for_another_registry_are_not_sent(project, upstreams):
    """Only the host they are stored for gets them: not another port on the same address."""
    root, cli = project
    other = "127.0.0.1:1"
    config = write_config(root / "docker-config", {"auths": {other: {"auth": basic()}}})
    result = cli("resolve", env=env_for(config))
    assert result.code == 0, result.output
    assert not [a for _, _, h in upstreams.registry.log if (a := h.get("Authorization")) and a.startswith("Basic")]


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("{not json", "it is not JSON"),
        ("[]", "expected a JSON object, found list"),
        ({"auths": {"nvcr.io": "x"}}, "auths['nvcr.io']: expected an object, found str"),
        ({"auths": {"REG": {"auth": "bm90LWJhc2U2NA"}}}, "auths['REG'].auth: expected base64 of user:password"),
        ({"auths": {"REG": {"auth": base64.b64encode(b"no-colon-" + PASSWORD.encode()).decode()}}}, ".auth: expected"),
        ({"auths": {"REG": {"identitytoken": f"two words {IDENTITY_TOKEN}"}}}, ".identitytoken: expected a token"),
        ({"credsStore": "../../bin/sh"}, "credsStore: expected a helper name"),
        ({"credHelpers": {"REG": 7}}, "credHelpers['REG']: expected a helper name"),
        ({"credHelpers": ["x"]}, "credHelpers: expected an object, found list"),
        ("x" * (2 << 20), "larger than 1 MiB"),
    ],
)
def test_a_malformed_docker_config_is_one_clear_error(project, upstreams, config, needle):
    root, cli = project
    registry = private(upstreams, "token")
    if isinstance(config, dict):
        config = json.loads(json.dumps(config).replace("REG", registry))
        needle = needle.replace("REG", registry)
    result = cli("resolve", env=env_for(write_config(root / "docker-config", config)))
    assert_failed(result, 5, "Docker's config", needle, "set DOCKER_CONFIG to another directory")
    assert_no_secret({"stderr": result.stderr})
    assert "bm90LWJhc2U2NA" not in result.stderr  # a value is never quoted, only its key


def test_a_config_that_is_not_a_regular_file(project, upstreams):
    root, cli = project
    private(upstreams, "token")
    (root / "docker-config" / "config.json").mkdir(parents=True)
    assert_failed(cli("resolve", env=env_for(root / "docker-config")), 5, "it is not a regular file")
    fifo_dir = root / "fifo-config"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "config.json")  # a reader that waited for a writer would hang here
    assert_failed(cli("resolve", env=env_for(fifo_dir)), 5, "it is not a regular file")


@pytest.mark.parametrize("variant", ["auths-basic-token-flow", "auths-identitytoken", "credsStore", "credHelpers"])
def test_no_credential_appears_in_any_output_lock_or_file(project, upstreams, variant):
    """resolve (--json and plain, then --check), and doctor checking the same registry for a push: the password,
    the identity token, and their base64 forms appear in no output, in the lock, or in any file under the project,
    its cache or build dir."""
    root, cli = project
    registry = private(upstreams, VARIANTS[variant][0])
    env = {**setup(root, registry, variant), "COLUMNS": "1000"}  # no wrapping: a split secret would hide
    outputs = {}
    for args in (["resolve", "--json"], ["resolve"], ["resolve", "--check"]):
        if args == ["resolve"]:
            (root / "pins.lock").unlink()
        result = cli(*args, env=env)
        assert result.code == 0, result.output
        outputs[" ".join(args)] = result.stdout + result.stderr
    doctor = cli("doctor", "--push", "--tag", f"{registry}/team/nemo-rl:1", env=env, timeout=300)
    assert "credentials" in doctor.stderr and f"credentials for {registry} from" in doctor.stderr, doctor.output
    outputs["doctor"] = doctor.stdout + doctor.stderr
    assert_no_secret({**outputs, **files_buildkit_wrote(root)})


def test_doctor_reports_a_missing_helper_as_a_failed_check(cli, tmp_path):
    config = write_config(tmp_path / "docker-config", {"credHelpers": {"registry.example.com": "buildkit-missing"}})
    env = {**env_for(config), "COLUMNS": "1000"}
    result = cli("doctor", "--push", "--tag", "registry.example.com/team/nemo-rl:1", env=env, timeout=300)
    assert result.code != 0 and "Traceback" not in result.output
    [row] = [line for line in result.stderr.splitlines() if "credentials" in line and "│" in line]
    assert "FAIL" in row and "docker-credential-buildkit-missing is not installed" in row, row
    assert "install docker-credential-buildkit-missing" in row


def test_doctor_says_where_credentials_come_from_or_that_there_are_none(cli, tmp_path):
    bin_dir = write_helper(tmp_path / "helper-bin", {"registry.example.com": [USERNAME, PASSWORD]})
    config = write_config(
        tmp_path / "docker-config",
        {"auths": {"ghcr.io": {"auth": basic()}}, "credHelpers": {"registry.example.com": HELPER}},
    )
    env = {**env_for(config, bin_dir), "COLUMNS": "1000"}
    rows = {}
    for tag in ("registry.example.com/t/n:1", "ghcr.io/t/n:1", "nvcr.io/t/n:1", "127.0.0.1:5999/t/n:1"):
        result = cli("doctor", "--push", "--tag", tag, env=env, timeout=300)
        [rows[tag]] = [line for line in result.stderr.splitlines() if line.startswith("│ credentials")]
    assert (
        "ok" in rows["registry.example.com/t/n:1"]
        and f"docker-credential-{HELPER} (credHelpers" in rows["registry.example.com/t/n:1"]
    )
    assert "ok" in rows["ghcr.io/t/n:1"] and f"auths in {config / 'config.json'}" in rows["ghcr.io/t/n:1"]
    assert "FAIL" in rows["nvcr.io/t/n:1"] and "docker login nvcr.io" in rows["nvcr.io/t/n:1"]
    assert "n/a" in rows["127.0.0.1:5999/t/n:1"] and "loopback" in rows["127.0.0.1:5999/t/n:1"]
    assert_no_secret({tag: row for tag, row in rows.items()})


# The lookup itself, in this process (the CLI tests above cover each path end to end).


def test_lookup_follows_docker_and_the_sdk(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert lookup("nvcr.io") is None  # no config at all
    write_config(
        tmp_path,
        {
            "auths": {
                "https://index.docker.io/v1/": {"auth": basic("hub-user")},
                "http://nvcr.io": {"auth": basic("$oauthtoken")},
                "quay.io": {},
                "ghcr.io": {"auth": ""},
            }
        },
    )
    hub = lookup("docker.io")
    assert hub is not None and hub.username == "hub-user" and hub.password == PASSWORD
    nvcr = lookup("nvcr.io")
    assert nvcr is not None and nvcr.username == "$oauthtoken" and nvcr.source == f"auths in {tmp_path}/config.json"
    assert lookup("quay.io") is None and lookup("ghcr.io") is None  # empty entries hold no credentials
    assert PASSWORD not in repr(hub) and PASSWORD not in str(hub)


def test_a_credential_answers_for_the_engine_and_for_basic_auth():
    login = Credential("r.example", "test", username=USERNAME, password=PASSWORD)
    assert login.basic_authorization() == f"Basic {basic()}"
    assert login.engine_auth() == {"username": USERNAME, "password": PASSWORD, "serveraddress": "r.example"}
    token = Credential("r.example", "test", identity_token=IDENTITY_TOKEN)
    assert token.basic_authorization() is None
    assert token.engine_auth() == {"identitytoken": IDENTITY_TOKEN, "serveraddress": "r.example"}


def test_a_helper_answer_that_is_not_the_protocol_is_refused(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-odd"
    helper.write_text(f"#!/bin/sh\necho 'Secret: {PASSWORD}'\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("DOCKER_CONFIG", str(write_config(tmp_path / "cfg", {"credsStore": "odd"})))
    with pytest.raises(CredentialsError) as info:
        DockerConfig.load().credential("r.example")
    assert "not the credential helper protocol" in info.value.message and PASSWORD not in info.value.message


# verify pulls an image the engine does not have, with the same credentials.


@pytest.fixture
def proxy_registry(project, upstreams, engine):
    """The project resolved, then the fake registry put in front of the engine's real one (127.0.0.1:5000): the
    stand-in base image, through the fake, as a name the engine does not have. The test makes it demand a login."""
    root, cli = project
    assert cli("resolve").code == 0
    upstreams.registry.backend = "http://" + STAND_IN_BASE.split("/")[0]
    image = f"{upstreams.registry.netloc}/{STAND_IN_BASE.split('/', 1)[1]}"
    subprocess.run(["docker", "rmi", image], capture_output=True)
    yield image
    subprocess.run(["docker", "rmi", image], capture_output=True)  # only this tag: the layers stay with the original


def test_verify_pulls_a_private_image_with_the_helpers_credentials(project, upstreams, proxy_registry):
    root, cli = project
    registry = private(upstreams, "token")
    env = setup(root, registry, "credHelpers")
    result = cli("verify", proxy_registry, "--json", env=env, timeout=300)
    # The stand-in base is not a build of the lock, so its checks fail: but it was pulled and checked.
    assert result.code == 1, result.output
    assert "check(s) failed" in result.stderr and json.loads(result.stdout)["image"] == proxy_registry
    assert [h.get("Authorization") for _, p, h in upstreams.registry.log if p.startswith("/token")][-1] == (
        f"Basic {basic()}"
    )
    assert helper_calls(root / "helper-bin") == [f"get {registry}"]
    assert_no_secret({"stdout": result.stdout, "stderr": result.stderr, **files_buildkit_wrote(root)})


def test_verify_with_a_refused_login_is_one_clear_error(project, upstreams, proxy_registry):
    root, cli = project
    registry = private(upstreams, "token", password="another-password")
    result = cli("verify", proxy_registry, env=setup(root, registry, "auths-basic-token-flow"), timeout=300)
    assert_failed(result, 5, f"the engine could not pull {proxy_registry} with the credentials from auths in")
    assert f"docker login {registry}" in result.stderr
    assert not (root / "build" / "verify.json").exists()
    assert_no_secret({"stderr": result.stderr})


def test_doctor_names_the_tools_export_and_attest_need(cli, tmp_path):
    """mksquashfs and cosign: found with their versions, or n/a with what to install (a build needs neither)."""
    old = tmp_path / "old-bin"
    old.mkdir()
    (old / "mksquashfs").write_text("#!/bin/sh\necho 'mksquashfs version 4.3 (2014/05/12)'\n")
    (old / "mksquashfs").chmod(0o755)
    env = {"PATH": f"{old}:{os.environ['PATH']}", "BUILDKIT_COSIGN": str(tmp_path / "no-cosign"), "COLUMNS": "1000"}
    result = cli("doctor", env=env, timeout=300)
    assert "Traceback" not in result.output
    rows = {line.split("│")[1].strip(): line for line in result.stderr.splitlines() if line.startswith("│ ")}
    assert "n/a" in rows["mksquashfs"] and "mksquashfs 4.3 is older than 4.5" in rows["mksquashfs"]
    assert "apt-get install squashfs-tools" in rows["mksquashfs"]
    assert "n/a" in rows["cosign"] and "is not an executable file" in rows["cosign"]
    assert "only `attest` and `verify --provenance` need it" in rows["cosign"]


def test_a_failing_helper_that_printed_the_credential_is_not_quoted(cli, tmp_path):
    """A helper that prints the credential and then exits non-zero: the error names the failure, never the secret."""
    bin_dir = tmp_path / "broken-bin"
    bin_dir.mkdir()
    secret = "glpat-S3cretValue-0123456789"
    helper = bin_dir / "docker-credential-broken"
    helper.write_text(
        f'#!/bin/sh\necho \'{{"ServerURL":"x","Username":"ci","Secret":"{secret}"}}\'\n'
        "echo 'keychain locked' >&2\nexit 1\n"
    )
    helper.chmod(0o755)
    config = write_config(tmp_path / "docker-config", {"credHelpers": {"registry.example.com": "broken"}})
    env = {**env_for(config, bin_dir), "COLUMNS": "1000"}
    result = cli("doctor", "--push", "--tag", "registry.example.com/team/nemo-rl:1", env=env, timeout=300)
    assert "docker-credential-broken get failed for registry.example.com (exit 1): 'keychain locked'" in result.stderr
    assert secret not in result.output


def test_a_helper_printing_without_end_is_cut_off_at_the_limit(tmp_path):
    """Its output is read up to the limit and no further (it once was read whole first: gigabytes of memory). No
    clock: `yes` never ends, so a run not cut off at the limit would end only at its 30 s deadline, as TimedOut."""
    from buildkit.world import proc

    done = proc.run(["sh", "-c", "yes credential"], stdout_limit=64 << 10, timeout=30)
    assert done.over and len(done.stdout) == 64 << 10


def test_a_credential_helper_that_prints_too_much_is_one_message(cli, tmp_path):
    bin_dir = tmp_path / "loud-bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-loud"
    helper.write_text('#!/bin/sh\nexec yes \'{"Username": "u"}\'\n')
    helper.chmod(0o755)
    config = write_config(tmp_path / "docker-config", {"credHelpers": {"registry.example.com": "loud"}})
    env = {**env_for(config, bin_dir), "COLUMNS": "1000"}
    result = cli("doctor", "--push", "--tag", "registry.example.com/team/nemo-rl:1", env=env, timeout=300)
    assert "docker-credential-loud get answered more than 64 KiB for registry.example.com" in result.stderr
    assert "Traceback" not in result.output


def _helper_script(bin_dir: Path, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / f"docker-credential-{HELPER}"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return bin_dir


def test_a_failing_helper_is_quoted_from_stderr_never_stdout(tmp_path, monkeypatch):
    """A helper that prints the credential and then fails: its stdout (the Secret) is never in the message."""
    from buildkit.world.credentials import _ask_helper

    answer = json.dumps({"ServerURL": "r.example", "Username": USERNAME, "Secret": PASSWORD})
    bin_dir = _helper_script(tmp_path / "bin", f"echo '{answer}'; echo 'the keyring is locked' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(CredentialsError) as caught:
        _ask_helper(HELPER, "r.example", "the config")
    text = caught.value.message + str(caught.value.hint)
    assert PASSWORD not in text and "the keyring is locked" in text
