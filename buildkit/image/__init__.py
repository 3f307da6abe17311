"""Image files: reading OCI layouts and index/manifest JSON (ocilayout.py), unpacking layers into a root
filesystem safely (unpack.py), comparing two images file by file (diff.py). Everything read is upstream bytes and
bounded. May import world, models, text and the base; never stages or the CLI."""
