"""The outside world, each behind one module: processes (proc.py), HTTP (http.py), git (git.py), OCI registries
(registry.py, shapes.py for checking their JSON, served.py for what they serve for an image), Docker's credentials
(credentials.py), the build engine (engine.py, buildx.py), cosign (cosign.py), mksquashfs (mksquashfs.py) and the
cache directory (cache.py). Everything that comes back is hostile until checked here. May import models, text and
the base; never image, dockerfile, gpu, stages or the CLI."""
