"""Python processes for the tests that start warm: forked from a parent that already imported torch, transformers,
datasets and mlm_suite, instead of paying those imports (~8 s of CPU on the CI machine) in every process.

A warm process is what ``python -m module args``, ``python script args`` or a console script such as
``mlm-suite args`` would be once its imports are done: it gets its own arguments, working folder, environment,
streams and exit status, it runs the same code (``runpy``, as ``python -m`` does), its interpreter exits as
Python's does (``atexit``, flushing), and a signal ends it as it would end those. What it skips is interpreter
start-up: a test of start-up itself (``python -m`` naming the module) starts a real process.

:meth:`WarmPython.launch` starts the ranks of a process group the same way, as ``accelerate launch`` would start
them, without the launcher. The parent serves one start at a time over its stdin and stdout, one JSON line each
way: the processes to start, then their ids once they started and their exit statuses once they all ended.
``tests/marks.py`` watches :meth:`WarmPython._request` as a process start (``multiprocess``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.helpers import free_port, launch_environment

# What the parent imports before it forks: what every job process imports, but not the modules a process
# runs as ``__main__`` (runpy would warn about a module run twice).
PRELOADED = ("torch", "transformers", "transformers.trainer", "datasets", "accelerate", "mlm_suite")

PARENT = r"""
import json, os, runpy, signal, sys

# Ctrl-C at a terminal raises KeyboardInterrupt in the job. A shell starts a background command (`pytest &` in a
# script, nohup) with SIGINT ignored, and Python then leaves it ignored, in this parent and every process it forks:
# the processes get Python's handler back, as a command started at a terminal has it.
signal.signal(signal.SIGINT, signal.default_int_handler)
for name in sys.argv[1:]:
    __import__(name)
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")  # fds 0-2 become the processes'


def reply(message):
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def serve():
    # Each request starts processes that run together (the ranks of a launch); the reply is their ids, then,
    # once all ended, their exit statuses. Returns the request of a forked process, None when the requests end.
    for line in requests:
        processes = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pids = []
        for process in processes:
            pid = os.fork()
            if pid == 0:
                return process
            pids.append(pid)
        reply({"pids": pids})
        statuses = {}
        while len(statuses) < len(pids):
            pid, status = os.wait()
            statuses[pid] = os.waitstatus_to_exitcode(status)
        reply({"returncodes": [statuses[pid] for pid in pids]})
    return None


request = serve()
if request is None:
    raise SystemExit(0)

# A forked process: what `python [-m module | script] args` does once its imports are done.
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
else:
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
sys.path[1:1] = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]  # as at start-up
if request["module"] is not None:
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
"""

class WarmProcess:
    """What :meth:`WarmPython.start` or :meth:`WarmPython.launch` started: one process, or the ranks of a launch, with
    the parts of ``subprocess.Popen`` the tests use. The status of several is the first failing one's (0 if none
    failed), as a launcher reports it."""

    def __init__(self, parent: WarmPython, argv: list[str], pids: list[int], streams: list[tuple[Path, Path]]):
        self.parent, self.args, self.pids, self.streams = parent, argv, pids, streams
        self.pid = pids[0]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.parent.replies], [], [], 0)[0]:
            codes = self.parent.reply()["returncodes"]
            self.returncode = next((code for code in codes if code != 0), 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            select.select([self.parent.replies], [], [], left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            for pid in self.pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:  # that one ended already
                    pass

    def completed(self) -> subprocess.CompletedProcess:
        """The exit status and streams (each process's in turn), as ``subprocess.run(..., capture_output=True,
        text=True)`` gives them."""
        assert self.returncode is not None, "still running"
        stdout, stderr = ("".join(pair[index].read_text(errors="replace") for pair in self.streams) for index in (0, 1))
        return subprocess.CompletedProcess(self.args, self.returncode, stdout, stderr)


class WarmPython:
    """A parent process that imported :data:`PRELOADED` and forks the processes the tests start, one start at a time."""

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

    def _request(self, argv: Sequence[str | os.PathLike], envs: list[Mapping[str, str]],
                 cwd: str | os.PathLike | None) -> WarmProcess:
        assert self.running is None or self.running.poll() is not None, "one start at a time"
        argv = [os.fspath(arg) for arg in argv]
        module = None
        if argv[0] == sys.executable:
            argv = argv[1:]
            if argv[0] == "-m":
                module, argv = argv[1], argv[1:]
        processes, streams = [], []
        for env in envs:
            self.count += 1
            stdout, stderr = self.folder / f"{self.count}.stdout", self.folder / f"{self.count}.stderr"
            processes.append({"argv": argv, "module": module, "cwd": os.fspath(cwd or os.getcwd()), "env": dict(env),
                              "stdout": str(stdout), "stderr": str(stderr)})
            streams.append((stdout, stderr))
        self.parent.stdin.write(json.dumps(processes) + "\n")
        self.parent.stdin.flush()
        self.running = WarmProcess(self, argv, self.reply()["pids"], streams)
        return self.running

    def start(self, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None) -> WarmProcess:
        """Start ``argv`` (``[sys.executable, "-m", module, ...]``, ``[sys.executable, script, ...]`` or
        ``[console_script, ...]``); its stdin is empty, its stdout and stderr are kept for :meth:`WarmProcess.completed`."""
        return self._request(argv, [os.environ if env is None else env], cwd)

    def run(self, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)``, started warm."""
        return self._finish(self.start(argv, env=env, cwd=cwd), timeout)

    def launch(self, script: Path, argv: Sequence[str], timeout: float, processes: int = 2) -> subprocess.CompletedProcess:
        """``script argv --use_cpu true`` as the ``processes`` ranks of one process group on CPU (gloo), started warm.

        Each process gets what torchrun gives it (its rank, the world size, the rendezvous address), which the
        Trainer's ``--use_cpu true`` turns into a gloo group, as under ``launch_two_processes``'s ``accelerate
        launch``. There is no launcher: a test of what the launcher does (stopping the others when one process
        fails) launches for real.
        """
        port = str(free_port())
        common = {**launch_environment(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                  "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes)}
        envs = [{**common, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in range(processes)]
        return self._finish(self._request([sys.executable, script, *argv, "--use_cpu", "true"], envs, None), timeout)

    @staticmethod
    def _finish(process: WarmProcess, timeout: float) -> subprocess.CompletedProcess:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            raise
        return process.completed()

    def close(self) -> None:
        self.parent.stdin.close()
        self.parent.wait(timeout=60)
