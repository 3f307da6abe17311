"""The outside world, each behind one module: processes (proc.py), HTTP (http.py), git (git.py), OCI registries
(registry.py, shapes.py for checking their JSON), Docker's credentials (credentials.py), the build engine (engine.py,
buildx.py), cosign (cosign.py) and the cache directory (cache.py). Everything that comes back is hostile until
checked here. May import models, text and the base; never image, dockerfile, gpu, stages or the CLI."""
