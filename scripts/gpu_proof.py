"""Prove buildkit's GPU checks against a real GPU (issue 23, point 5). Run on a machine with an NVIDIA GPU, CUDA's
nvcc and cuobjdump, and python3 with torch and CuPy; no network needed:

    PYTHONPATH=. python3 scripts/gpu_proof.py OUTDIR

(a) For every .so of the installed torch and CuPy, buildkit's fatbin reader (buildkit/gpu/fatbin.py) lists the
    same SASS and PTX entries as `cuobjdump --list-elf` / `--list-ptx` (cuobjdump names a family cubin `sm_100`,
    the reader `sm_100f`: compared without the `f`).
(b) Small kernels are built with nvcc for one target each, into shared objects; each is loaded on the GPU twice,
    with CUDA_DISABLE_PTX_JIT=1 and normally (CUDA's documented switches; CUDA_CACHE_DISABLE=1 both times), which
    tells SASS (runs both ways),
    PTX-JIT (runs only with JIT) and none (`no kernel image is available`, cudaErrorNoKernelImageForDevice) apart.
    buildkit's verdict (buildkit/gpu/coverage.py) for the GPU must equal what happened.
(c) The driver prediction (buildkit/gpu/driver.py, `driver.compare`, the function `verify --gpus` uses) for each
    CUDA runtime on the machine (torch's, CuPy's, the toolkit's libcudart) and the real driver (its version from
    /proc/driver/nvidia/version, else nvidia-smi), against whether that runtime actually initialises CUDA there (a
    device count and a kernel, each in its own process). No Docker needed.
Writes OUTDIR/proof.json (everything), OUTDIR/proof.txt (the summary) and OUTDIR/kernels.tar.gz (the shared
objects of (b), the unit tests' fixtures). Exit 0 when every comparison agrees.

    PYTHONPATH=. python3 scripts/gpu_proof.py --driver-only OUTDIR    # (c) alone: seconds
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from buildkit.gpu import driver
from buildkit.gpu.coverage import verdict
from buildkit.gpu.elfsections import ElfFile
from buildkit.gpu.fatbin import kernels

KERNEL = r"""
#include <cuda_runtime.h>
__global__ void add1(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
extern "C" int run_kernel(void) {
  float *x; cudaError_t e = cudaMalloc(&x, 256 * sizeof(float));
  if (e != cudaSuccess) return 1000 + (int)e;
  add1<<<1, 256>>>(x, 256);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaFree(x);
  return (int)e;
}
"""
# name -> nvcc -gencode values; expected on an H100 (compute capability 9.0) by NVIDIA's rules (coverage.py)
CASES = {
    "sm80": ["arch=compute_80,code=sm_80"],
    "sm80_ptx80": ["arch=compute_80,code=[sm_80,compute_80]"],
    "sm90": ["arch=compute_90,code=sm_90"],
    "sm90a": ["arch=compute_90a,code=sm_90a"],
    "sm100": ["arch=compute_100,code=sm_100"],
    "ptx90a": ["arch=compute_90a,code=compute_90a"],
    "ptx100": ["arch=compute_100,code=compute_100"],
    "sm86_ptx86": ["arch=compute_86,code=[sm_86,compute_86]"],
    "sm100f_ptx100f": ["arch=compute_100f,code=[sm_100f,compute_100f]"],
    "sm89_sm100a": ["arch=compute_89,code=sm_89", "arch=compute_100a,code=sm_100a"],
}
_LISTED_RE = re.compile(r"(?:ELF|PTX) file +[0-9]+: .*\.(sm_[0-9]+[af]?)\.(cubin|ptx)")


def sh(argv: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {exc}")


def reader_lists(path: Path) -> tuple[list[str], list[str], float]:
    start = time.perf_counter()
    with path.open("rb") as f:
        found = kernels(ElfFile(f, path.stat().st_size))
    took = time.perf_counter() - start
    sass = sorted(k.arch.removesuffix("f") if k.arch.endswith("f") else k.arch for k in found if k.kind == "sass")
    ptx = sorted("sm_" + k.arch.removeprefix("compute_") for k in found if k.kind == "ptx")
    return sass, ptx, took


def cuobjdump_lists(path: Path) -> tuple[list[str], list[str], float]:
    start = time.perf_counter()
    out = {}
    for flag in ("--list-elf", "--list-ptx"):
        done = sh(["cuobjdump", flag, str(path)])
        out[flag] = sorted(m[1] for m in _LISTED_RE.finditer(done.stdout))
    return out["--list-elf"], out["--list-ptx"], time.perf_counter() - start


def compare_file(path: Path) -> dict:
    row: dict = {"file": str(path), "size": path.stat().st_size}
    try:
        sass, ptx, took = reader_lists(path)
        row.update(reader_s=round(took, 4), sass=dict(Counter(sass)), ptx=dict(Counter(ptx)))
    except Exception as exc:  # noqa: BLE001 - recorded, counted as a disagreement
        row.update(reader_error=f"{type(exc).__name__}: {exc}")
        sass = ptx = None
    c_sass, c_ptx, c_took = cuobjdump_lists(path)
    row.update(cuobjdump_s=round(c_took, 4), cuobjdump_sass=dict(Counter(c_sass)), cuobjdump_ptx=dict(Counter(c_ptx)))
    row["agree"] = sass == c_sass and ptx == c_ptx
    return row


def shared_objects(module: str) -> list[Path]:
    done = sh([sys.executable, "-c", f"import {module}, os; print(os.path.dirname({module}.__file__))"])
    if done.returncode != 0:
        return []
    root = Path(done.stdout.strip())
    return sorted(p for p in root.rglob("*.so*") if p.is_file() and not p.is_symlink() and ".so" in p.name)


def load(path: Path, jit: bool) -> int:
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")  # else a JIT-compiled kernel from the cache loads without JIT
    if not jit:
        env["CUDA_DISABLE_PTX_JIT"] = "1"
    code = f"import ctypes; print(ctypes.CDLL({str(path)!r}).run_kernel())"
    done = sh([sys.executable, "-c", code], env=env, timeout=300)
    try:
        return int(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return -1


def observed(path: Path) -> tuple[str, int, int]:
    without_jit, with_jit = load(path, False), load(path, True)
    if with_jit == 0 and without_jit == 0:
        return "SASS", with_jit, without_jit
    if with_jit == 0:
        return "PTX-JIT", with_jit, without_jit
    if with_jit == 209:  # cudaErrorNoKernelImageForDevice: "no kernel image is available for execution on the device"
        return "none", with_jit, without_jit
    return f"error {with_jit}", with_jit, without_jit


def device_cc() -> tuple[int, int] | None:
    done = sh(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    if done.returncode != 0 or not done.stdout.strip():
        return None
    major, minor = done.stdout.split()[0].split(".")
    return int(major), int(minor)


# Each prints one JSON line: the runtime's CUDA version and whether it initialised CUDA and ran a kernel.
RUNTIME_PROBES = {
    "torch": "import json, torch\n"
    "ok = torch.cuda.is_available() and float((torch.ones(4, device='cuda') + 1).sum()) == 8.0\n"
    "print(json.dumps({'cuda': torch.version.cuda, 'started': bool(ok)}))",
    "cupy": "import json, cupy\n"
    "v = cupy.cuda.runtime.runtimeGetVersion()\n"
    "ok = cupy.cuda.runtime.getDeviceCount() > 0 and int((cupy.ones(4) + 1).sum()) == 8\n"
    "print(json.dumps({'cuda': f'{v // 1000}.{v % 1000 // 10}', 'started': bool(ok)}))",
    "toolkit libcudart": "import ctypes, glob, json\n"
    "lib = ctypes.CDLL(sorted(glob.glob('/usr/local/cuda/lib64/libcudart.so.*'))[0])\n"
    "v, n = ctypes.c_int(), ctypes.c_int()\n"
    "lib.cudaRuntimeGetVersion(ctypes.byref(v))\n"
    "rc = lib.cudaGetDeviceCount(ctypes.byref(n))\n"
    "print(json.dumps({'cuda': f'{v.value // 1000}.{v.value % 1000 // 10}', "
    "'started': rc == 0 and n.value > 0, 'rc': rc}))",
}


def real_driver() -> str:
    """The kernel module's version (580.159.04): /proc/driver/nvidia/version, else nvidia-smi."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()[:4096]
        found = re.search(r"Kernel Module(?: for [^ ]+)? +([0-9]{3,4}(?:\.[0-9]{1,3}){1,2})", text)
        if found:
            return found[1]
    except OSError:
        pass
    done = sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return done.stdout.strip().splitlines()[0].strip() if done.returncode == 0 and done.stdout.strip() else ""


def driver_proof() -> dict:
    """(c): the prediction for each runtime on the real driver against whether it started."""
    have = real_driver()
    compat = Path("/usr/local/cuda/compat").is_dir()
    rows = []
    for name, code in RUNTIME_PROBES.items():
        done = sh([sys.executable, "-c", code], timeout=300)
        row: dict = {"runtime": name, "driver": have, "compat_package": compat}
        try:
            row.update(json.loads(done.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row.update(error=(done.stdout + done.stderr).strip()[-400:])
            rows.append(row)
            continue
        try:
            # The runtime here is not loaded through the compat package (no LD_LIBRARY_PATH to it): not forward.
            row["agree"], row["line"] = driver.compare(row["cuda"], have, False, row["started"])
        except ValueError as exc:
            row.update(agree=False, line=str(exc))
        rows.append(row)
    return {"driver": have, "runtimes": rows, "ok": bool(rows) and all(r.get("agree") for r in rows)}


def driver_lines(proof: dict) -> list[str]:
    return [
        f"(c) {r['runtime']:18} {r.get('line') or r.get('error')} {'OK' if r.get('agree') else 'MISMATCH'}"
        for r in proof["runtimes"]
    ]


def main() -> int:
    if sys.argv[1] == "--driver-only":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        proof = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "driver_proof": driver_proof()}
        (out / "driver_proof.json").write_text(json.dumps(proof, indent=1, sort_keys=True))
        lines = [
            f"date {proof['date']}",
            f"driver {proof['driver_proof']['driver']}",
            *driver_lines(proof["driver_proof"]),
        ]
        (out / "driver_proof.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0 if proof["driver_proof"]["ok"] else 1
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, argv in {
        "nvidia_smi": ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
        "nvcc": ["nvcc", "--version"],
        "cuobjdump": ["cuobjdump", "--version"],
        "torch": [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        "cupy": [sys.executable, "-c", "import cupy; print(cupy.__version__)"],
        "nvidia_smi_header": ["sh", "-c", "nvidia-smi | head -4"],
        "cuda_runtime": [
            "sh",
            "-c",
            "ls /usr/local/cuda/lib64/libcudart.so.* 2>&1; grep -A3 '\"cuda\"' "
            "/usr/local/cuda/version.json 2>&1 | head -4",
        ],
        "compat": ["sh", "-c", "ls -d /usr/local/cuda*/compat 2>&1; ls /usr/local/cuda*/compat 2>&1 | head"],
    }.items():
        done = sh(argv)
        result[name] = (done.stdout + done.stderr).strip()[-600:]
    cc = device_cc()
    result["compute_capability"] = cc

    # (a) the reader against cuobjdump
    files = shared_objects("torch") + shared_objects("cupy") + shared_objects("cupy_backends")
    with ThreadPoolExecutor(max_workers=12) as pool:
        rows = list(pool.map(compare_file, files))
    result["listing"] = rows

    # (b) small kernels, built here, loaded on the GPU
    cases = []
    work = Path(tempfile.mkdtemp())
    (work / "k.cu").write_text(KERNEL)
    built: list[Path] = []
    for name, gencodes in CASES.items():
        so = work / f"libk_{name}.so"
        argv = ["nvcc", "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-o", str(so), str(work / "k.cu")]
        for g in gencodes:
            argv[1:1] = ["-gencode", g]
        done = sh(argv)
        case: dict = {"case": name, "gencode": gencodes}
        if done.returncode != 0:
            case["build_error"] = (done.stdout + done.stderr).strip()[-400:]
            cases.append(case)
            continue
        built.append(so)
        case.update(compare_file(so))
        with so.open("rb") as f:
            found = kernels(ElfFile(f, so.stat().st_size))
        if cc is not None:
            predicted = verdict(found, cc).load
            seen, rc_jit, rc_nojit = observed(so)
            case.update(
                predicted=predicted, observed=seen, rc_with_jit=rc_jit, rc_without_jit=rc_nojit, match=predicted == seen
            )
        cases.append(case)
    result["kernels"] = cases
    with tarfile.open(out / "kernels.tar.gz", "w:gz") as tar:
        for so in built:
            tar.add(so, arcname=so.name)
        tar.add(work / "k.cu", arcname="k.cu")
    shutil.rmtree(work, ignore_errors=True)

    result["driver_proof"] = driver_proof()
    listing_ok = all(r["agree"] for r in rows)
    kernels_ok = bool(cases) and all(c.get("match") for c in cases)
    driver_ok = result["driver_proof"]["ok"]
    result["ok"] = {"listing": listing_ok, "kernels": kernels_ok, "driver": driver_ok}
    (out / "proof.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    lines = [
        f"date {result['date']}",
        f"gpu {result['nvidia_smi']}",
        f"torch {result['torch']}",
        f"cupy {result['cupy']}",
        f"compat: {result['compat']}",
        f"(a) {sum(r['agree'] for r in rows)} of {len(rows)} .so files: reader == cuobjdump; entries: "
        f"{sum(sum(r.get('sass', {}).values()) + sum(r.get('ptx', {}).values()) for r in rows)}; reader "
        f"{sum(r.get('reader_s', 0) for r in rows):.2f} s, cuobjdump {sum(r['cuobjdump_s'] for r in rows):.2f} s",
    ]
    lines += [f"    DISAGREE {r['file']}: {r}" for r in rows if not r["agree"]]
    for c in cases:
        lines.append(
            f"(b) {c['case']:16} {' '.join(c['gencode']):60} predicted {c.get('predicted')!s:8} observed "
            f"{c.get('observed')!s:8} (rc {c.get('rc_with_jit')}/{c.get('rc_without_jit')}) "
            f"{'OK' if c.get('match') else 'MISMATCH'} {c.get('build_error', '')}"
        )
    lines += driver_lines(result["driver_proof"])
    (out / "proof.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if listing_ok and kernels_ok and driver_ok else 1


if __name__ == "__main__":
    sys.exit(main())
