"""The C of ext/kc_crc32c.h built on its own: the host's hardware path, the portable-only
build, and the aarch64 path under qemu where a cross compiler is installed."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_name("native") / "crc32c_paths.c"
CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None or not (ROOT / "ext").is_dir(), reason="needs a C compiler and the source tree")


def _build_and_run(tmp_path, compiler, flags=(), runner=(), env=None):
    exe = tmp_path / "crc32c_paths"
    subprocess.run(
        [compiler, "-O2", "-Wall", "-Wextra", "-Werror", *flags, "-I", str(ROOT / "ext"), "-o", str(exe), str(SOURCE)],
        check=True, capture_output=True, text=True, timeout=120,
    )
    out = subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def test_host_build_agrees_with_the_tables(tmp_path):
    name, crc = _build_and_run(tmp_path, CC)
    assert crc == "e3069283"
    assert name in ("sse4.2+vpclmulqdq", "sse4.2", "armv8-crc", "none")


def test_crc32_instruction_only_build(tmp_path):
    """Without the carry-less multiply path, on any x86-64 host with SSE4.2 (the path a CPU
    without AVX2 or VPCLMULQDQ takes)."""
    name, crc = _build_and_run(tmp_path, CC, ["-DKC_CRC_NO_VPCLMUL"])
    assert crc == "e3069283"
    assert name in ("sse4.2", "armv8-crc", "none")


def test_portable_only_build(tmp_path):
    assert _build_and_run(tmp_path, CC, ["-DKC_CRC_NO_HW"]) == ["none", "e3069283"]


@pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64-static")),
    reason="needs gcc-aarch64-linux-gnu and qemu-user-static",
)
def test_aarch64_crc_extension_path(tmp_path):
    env = {**os.environ, "QEMU_LD_PREFIX": os.environ.get("QEMU_LD_PREFIX", "/usr/aarch64-linux-gnu")}
    result = _build_and_run(
        tmp_path, "aarch64-linux-gnu-gcc", runner=["qemu-aarch64-static", "-cpu", "max"], env=env
    )
    assert result == ["armv8-crc", "e3069283"]
