"""scripts/gpu/carry.sh on a small wheel: parts and SHA256SUMS here (a DROP path left out, one the wheels lack
refused), then on the "device" side a missing or damaged part is named (exit 3) and a complete set unpacks into a
folder that imports before site-packages."""

import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

CARRY = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "carry.sh"


def run(*args, env):
    return subprocess.run(["bash", str(CARRY), *args], env=env, capture_output=True, text=True)


def test_carry_pack_check_unpack(tmp_path):
    wheel = tmp_path / "carry_probe_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("carry_probe_pkg/__init__.py", "VALUE = 'carried'\n")
        z.writestr("carry_probe_pkg/blob.bin", random.Random(0).randbytes(300_000))  # xz cannot shrink it
        z.writestr("carry_probe_pkg/include/big.h", "// dropped\n")
        z.writestr("carry_probe_pkg-1.0.dist-info/METADATA", "Name: carry-probe-pkg\nVersion: 1.0\n")
    bindir = os.path.dirname(sys.executable)  # `python3` with torch, as on the GPU machine
    env = dict(os.environ, CARRY_DIR=str(tmp_path / "carry"), PART_SIZE="100K", PATH=f"{bindir}:{os.environ['PATH']}")
    assert run("pack", "t", str(wheel), env=dict(env, DROP="carry_probe_pkg/nothing")).returncode == 2
    packed = run("pack", "t", str(wheel), env=dict(env, DROP="carry_probe_pkg/include"))
    assert packed.returncode == 0, packed.stderr
    parts = sorted((tmp_path / "carry" / "t").glob("part.*"))
    assert len(parts) >= 3 and packed.stdout.count("carry.sh check t") == len(parts)

    held = parts[1].read_bytes()
    parts[1].unlink()
    missing = run("check", "t", env=env)
    assert missing.returncode == 3 and f"missing or damaged: {parts[1].name}" in missing.stderr
    assert f"{len(parts) - 1} of {len(parts)} parts whole" in missing.stderr
    parts[1].write_bytes(held[:-1] + bytes([held[-1] ^ 1]))  # damaged: the last byte flipped
    assert run("check", "t", env=env).returncode == 3
    parts[1].write_bytes(held)
    assert run("check", "t", env=env).returncode == 0

    target = tmp_path / "target"
    unpacked = run("unpack", "t", str(target), env=env)
    assert unpacked.returncode == 0, unpacked.stderr
    assert unpacked.stdout.strip().startswith(f"export PYTHONPATH={target}")
    assert (target / "carry_probe_pkg" / "blob.bin").stat().st_size == 300_000
    assert not (target / "carry_probe_pkg" / "include").exists()  # DROP
    links = sorted(p.name for p in (target / "nvidia").iterdir())  # the image's CUDA libraries, for torch's RPATH
    assert links and all((target / "nvidia" / name).is_symlink() for name in links)
    probe = "import carry_probe_pkg; print(carry_probe_pkg.VALUE, carry_probe_pkg.__file__)"
    out = subprocess.run(
        ["bash", "-c", f"{unpacked.stdout}\npython3 -c {probe!r}"], env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["carried", str(target / "carry_probe_pkg" / "__init__.py")], out.stderr
