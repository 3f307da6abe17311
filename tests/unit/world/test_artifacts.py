"""OCI 1.1 referrers (buildkit/world/artifacts.py) against a registry that has the referrers API: a loopback server
that answers as the OCI distribution spec v1.1 says (spec.md: a manifest PUT with a `subject` answered with the
`OCI-Subject` header, and `GET /v2/<name>/referrers/<digest>` an image index of the artifacts' descriptors with
their `artifactType` and annotations). The client then keeps no tag of its own; an artifact of the same payload is
attached once. (The engine's registry, without the API, is tests/e2e/test_cluster.py's: the tag schema.)"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from buildkit.world.artifacts import BUNDLE_TYPE, SBOM_TYPE, Artifacts, attach_files
from buildkit.world.http import Http
from buildkit.world.registry import parse_image_ref

INDEX = "application/vnd.oci.image.index.v1+json"


class _Registry(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}  # digest or tag -> (media type, bytes)
        self.log: list[tuple[str, str]] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Registry

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self.server.log.append((self.command, self.path))
        parts = self.path.split("/")  # /v2/<name>/<kind>/<reference>
        name, kind, reference = "/".join(parts[2:-2]), parts[-2], parts[-1]
        if kind == "blobs" and reference in self.server.blobs:
            return self._answer(200, self.server.blobs[reference])
        if kind == "manifests" and reference in self.server.manifests:
            media_type, body = self.server.manifests[reference]
            return self._answer(200, body, {"Content-Type": media_type})
        if kind == "referrers":
            found = []
            for media_type, body in {v for k, v in self.server.manifests.items() if k.startswith("sha256:")}:
                manifest = json.loads(body)
                if (manifest.get("subject") or {}).get("digest") == reference:
                    found.append({"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                                  "size": len(body), "artifactType": manifest.get("artifactType"),
                                  "annotations": manifest.get("annotations", {})})  # fmt: skip
            index = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": found}).encode()
            return self._answer(200, index, {"Content-Type": INDEX})
        del name
        self._answer(404)

    def do_POST(self) -> None:
        self.server.log.append((self.command, self.path))
        self._body()
        self._answer(202, headers={"Location": self.path + "u1"})

    def do_PUT(self) -> None:
        self.server.log.append((self.command, self.path.split("?")[0]))
        body = self._body()
        if "/blobs/uploads/" in self.path:
            digest = self.path.split("digest=")[1]
            assert digest == "sha256:" + hashlib.sha256(body).hexdigest()
            self.server.blobs[digest] = body
            return self._answer(201)
        reference = self.path.split("/")[-1]
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.server.manifests[reference] = self.server.manifests[digest] = (self.headers["Content-Type"], body)
        subject = (json.loads(body).get("subject") or {}).get("digest")
        self._answer(201, headers={"OCI-Subject": subject} if subject else {})


def test_with_the_referrers_api_the_artifacts_are_found_there_and_no_tag_is_written():
    registry = _Registry()
    threading.Thread(target=registry.serve_forever, daemon=True).start()
    try:
        host = f"127.0.0.1:{registry.server_address[1]}"
        image_manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                     "config": {}, "layers": []}).encode()  # fmt: skip
        subject = "sha256:" + hashlib.sha256(image_manifest).hexdigest()
        registry.manifests[subject] = ("application/vnd.oci.image.manifest.v1+json", image_manifest)
        files = [(SBOM_TYPE, "x.cdx.json", b'{"bomFormat":"CycloneDX"}'), (BUNDLE_TYPE, "x.sigstore.json", b"{}")]
        how = attach_files(f"{host}/team/nemo-rl@{subject}", subject, files, Http())
        assert how == "the referrers API"
        image = parse_image_ref(f"{host}/team/nemo-rl@{subject}")
        listed, found_how = Artifacts(Http()).referrers(image, subject)
        assert found_how == "the referrers API"
        assert sorted(e["artifactType"] for e in listed) == sorted([SBOM_TYPE, BUNDLE_TYPE])
        artifact = json.loads(registry.manifests[listed[0]["digest"]][1])
        assert (
            artifact["subject"]["digest"] == subject
            and artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
        )
        assert not any(
            path.endswith("/manifests/" + subject.replace(":", "-")) for m, path in registry.log if m == "PUT"
        )
        puts = len([1 for m, path in registry.log if m == "PUT" and "/manifests/" in path])
        attach_files(f"{host}/team/nemo-rl@{subject}", subject, files, Http())  # again: each payload attached once
        assert len([1 for m, path in registry.log if m == "PUT" and "/manifests/" in path]) == puts
    finally:
        registry.shutdown()
