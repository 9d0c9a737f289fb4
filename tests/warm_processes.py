"""Python processes for the tests that start warm: forked from a parent that already imported torch, transformers,
datasets and mlm_suite, instead of paying those imports (~8 s of CPU on the CI machine) in every process.

A warm process is what ``python -m module args``, ``python script args`` or a console script such as
``mlm-suite args`` would be once its imports are done: it gets its own arguments, working folder, environment,
streams and exit status, it runs the same code (``runpy``, as ``python -m`` does), its interpreter exits as
Python's does (``atexit``, flushing), and a signal ends it as it would end those. What it skips is interpreter
start-up: a test of start-up itself (``python -m`` naming the module) starts a real process.

The parent serves one process at a time over its stdin and stdout, one JSON line each way: a request, then the
process's id once it started and its exit status once it ended. ``tests/marks.py`` watches
:meth:`WarmPython.start` as a process start (``multiprocess``).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# What the parent imports before it forks: what every job process imports, but not the modules a process
# runs as ``__main__`` (runpy would warn about a module run twice).
PRELOADED = ("torch", "transformers", "transformers.trainer", "datasets", "accelerate", "mlm_suite")

PARENT = r"""
import json, os, runpy, sys

for name in sys.argv[1:]:
    __import__(name)
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")  # fds 0-2 become the process's
request = None
for line in requests:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        break
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
    request = None
if request is None:  # the tests' session closed the requests
    raise SystemExit(0)

# The forked process: what `python [-m module | script] args` does once its imports are done.
requests.close()
replies.close()
for fd, path, flags in [(0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
if "OMP_NUM_THREADS" in os.environ:  # read by torch when it started its thread pool, in the parent
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
sys.argv = request["argv"]
if request["module"] is not None:
    sys.path[0] = os.getcwd()
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
else:
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


class WarmProcess:
    """A process started by :meth:`WarmPython.start`, with the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, parent: WarmPython, argv: list[str], pid: int, stdout: Path, stderr: Path):
        self.parent, self.args, self.pid = parent, argv, pid
        self._stdout, self._stderr = stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.parent.replies], [], [], 0)[0]:
            self.returncode = self.parent.reply()["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            select.select([self.parent.replies], [], [], left)
        return self.returncode

    def send_signal(self, signal: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal)

    def completed(self) -> subprocess.CompletedProcess:
        """The ended process's exit status and streams, as ``subprocess.run(..., capture_output=True, text=True)``."""
        assert self.returncode is not None, "the process is still running"
        stdout, stderr = (path.read_text(errors="replace") for path in (self._stdout, self._stderr))
        return subprocess.CompletedProcess(self.args, self.returncode, stdout, stderr)


class WarmPython:
    """A parent process that imported :data:`PRELOADED` and forks a process per :meth:`start`, one at a time."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.parent = subprocess.Popen([sys.executable, "-c", PARENT, *PRELOADED], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.replies = self.parent.stdout
        self.running: WarmProcess | None = None
        self.count = 0

    def reply(self) -> dict:
        line = self.replies.readline()
        assert line, f"the warm parent ended (status {self.parent.wait()})"
        return json.loads(line)

    def start(self, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None) -> WarmProcess:
        """Start ``argv`` (``[sys.executable, "-m", module, ...]``, ``[sys.executable, script, ...]`` or
        ``[console_script, ...]``); its stdin is empty, its stdout and stderr are kept for :meth:`WarmProcess.completed`."""
        assert self.running is None or self.running.poll() is not None, "one warm process at a time"
        argv = [os.fspath(arg) for arg in argv]
        module = None
        if argv[0] == sys.executable:
            argv = argv[1:]
            if argv[0] == "-m":
                module, argv = argv[1], argv[1:]
        self.count += 1
        stdout, stderr = self.folder / f"{self.count}.stdout", self.folder / f"{self.count}.stderr"
        request = {"argv": argv, "module": module, "cwd": os.fspath(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env), "stdout": str(stdout), "stderr": str(stderr)}
        self.parent.stdin.write(json.dumps(request) + "\n")
        self.parent.stdin.flush()
        self.running = WarmProcess(self, argv, self.reply()["pid"], stdout, stderr)
        return self.running

    def run(self, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)``, started warm."""
        process = self.start(argv, env=env, cwd=cwd)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(9)
            process.wait()
            raise
        return process.completed()

    def close(self) -> None:
        self.parent.stdin.close()
        self.parent.wait(timeout=60)

