"""How many CPUs the grader may really use: the cgroup's CPU quota, not the host's cores.

Inside a container (Gradescope, a CI runner, Docker with ``--cpus 2``), ``os.cpu_count()`` is
the number of cores of the *host*, often 32 or 64, while the container may only use two of
them. Grading with a lane per host core then runs 30 test processes on two CPUs' worth of time.
:func:`available_cpus` takes the smallest of:

* the CPUs this process may be scheduled on (``os.sched_getaffinity``);
* the cgroup v2 quota, ``cpu.max`` (``"200000 100000"`` is 2 CPUs; ``"max ..."`` no limit), of
  this process's cgroup and of every cgroup above it;
* the cgroup v1 quota, ``cpu.cfs_quota_us / cpu.cfs_period_us`` (``-1``: no limit);

and ``KATA_CPUS``, when set, overrides them all. A fractional quota (1.5 CPUs) rounds down, but
never below 1. ``python grader.py cpus`` prints it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus", "cgroup_quota"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quota(text: str | None) -> float | None:
    """CPUs of a cgroup v2 ``cpu.max`` line, or None (no limit, or unreadable)."""
    parts = (text or "").split()
    if not parts or parts[0] == "max":
        return None
    try:
        quota = int(parts[0])
        period = int(parts[1]) if len(parts) > 1 else 100_000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        quota_us, period_us = int(quota or "-1"), int(period or "0")
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _inside(root: Path, relative: str) -> list[Path]:
    """``root/relative`` and every folder above it up to ``root``, deepest first."""
    folder = root / relative.lstrip("/")
    return [f for f in (folder, *folder.parents) if f == root or root in f.parents]


def cgroup_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The tightest CPU quota over this process's cgroups (v2 and v1), in CPUs; None: none."""
    quotas: list[float | None] = []
    lines = (_read(proc_cgroup) or "").splitlines()
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, relative = parts
        if controllers == "":  # cgroup v2: "0::/path"
            quotas += [_v2_quota(_read(f / "cpu.max")) for f in _inside(cgroup_root, relative)]
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            names = dict.fromkeys([controllers, "cpu,cpuacct", "cpu"])
            base = next((cgroup_root / n for n in names if (cgroup_root / n).is_dir()), None)
            if base is not None:
                quotas += [_v1_quota(folder) for folder in _inside(base, relative)]
    if not lines:  # no /proc: try the root cgroup itself (v2, then v1)
        quotas += [_v2_quota(_read(cgroup_root / "cpu.max")), _v1_quota(cgroup_root / "cpu")]
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def available_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP,
                   environ=None) -> int:
    """The CPUs the grader may use (at least 1); see the module's docstring."""
    environ = os.environ if environ is None else environ
    override = environ.get("KATA_CPUS", "").strip()
    if override:
        try:
            return max(1, int(override))
        except ValueError:
            pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota + 1e-9)))
    return max(1, cpus)
