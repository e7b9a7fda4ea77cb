"""A process's own peak RSS, for the bench scripts' child processes.

VmHWM of /proc/self/status: the high-water RSS of this process's address space, which execve starts afresh.
Not getrusage's ru_maxrss: at execve Linux folds the old address space's high-water mark into it, and a child that
subprocess forks (or vforks, sharing the parent's memory) keeps the parent's, so a child reports at least its
parent's RSS (tests/e2e/test_fullsize.py shows it).
"""

from __future__ import annotations

# An expression (kB), to be placed in the code of a child process that has not this module on its path.
PEAK_RSS_KB = "int(next(line for line in open('/proc/self/status') if line.startswith('VmHWM:')).split()[1])"


def peak_rss_kb() -> int:
    """This process's own peak RSS in kB (VmHWM)."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
