"""GPU compatibility proven before the build: which kernels a library carries for which GPU (fatbin.py,
coverage.py), whether its dynamic symbols link (abi.py), and which drivers run the image's CUDA (driver.py).

Everything here reads upstream bytes (wheels, the built image's files): every size, count and offset is checked
against the file's size and a fixed limit before it is read, and a malformed file is one GpuFileError. May import
world, models, text and the base; never stages or the CLI.
"""
