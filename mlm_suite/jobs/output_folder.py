"""Claiming a job's output folder: it must not overlap the folders the job reads, and one run writes it at a time.

A job calls :func:`claim_output_folder` once its flags are checked, before it writes anything. The claim is a lock
file beside the folder, ``.<name>.lock`` (so a run refused later leaves the folder as it was), holding the owner's
pid and host; :func:`~mlm_suite.jobs.distributed.run_job` removes it when the job ends, however it ends, and
interpreter exit removes what is left. A lock whose process no longer runs on this host is taken over with a
printed line. See docs/command_line.md#what-is-refused-what-is-accepted-and-why.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mlm_suite.errors import UsageError


@dataclass
class _Claim:
    lock: Path
    created: list[Path] = field(default_factory=list)  # parent folders made for the lock, deepest last


# The folders this process holds, by resolved path.
_held: dict[Path, _Claim] = {}


def lock_path(folder: str | os.PathLike) -> Path:
    """The lock file of ``folder``: ``.<name>.lock`` in its parent (real paths, so every spelling shares one lock)."""
    folder = Path(folder).expanduser().resolve()
    return folder.parent / f".{folder.name}.lock"


def is_main_process() -> bool:
    """Whether this process writes the outputs: rank 0 of a torchrun or accelerate launch (``RANK``), or alone.

    Read from the launcher's environment because the claim comes before the Trainer sets up the process group.
    """
    return os.environ.get("RANK", "0") == "0"


def check_no_overlap(output_dir: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None],
                     flag: str = "--output_dir") -> None:
    """Refuse an output folder that is, contains or lies inside an input folder: writing it would overwrite or mix
    with what the job reads (``inputs``: flag → value; Hub ids and files are not folders and pass)."""
    output = Path(output_dir).expanduser().resolve()
    if output.exists() and not output.is_dir():
        raise UsageError(f"{flag} {output_dir} is a file, not a folder")
    for input_flag, value in inputs.items():
        if not value or not Path(value).expanduser().is_dir():
            continue
        source = Path(value).expanduser().resolve()
        if output == source:
            relation = "is"
        elif source.is_relative_to(output):
            relation = "contains"
        elif output.is_relative_to(source):
            relation = "lies inside"
        else:
            continue
        raise UsageError(f"{flag} {output_dir} {relation} {input_flag} {value}: the run would write over what it "
                         f"reads; choose another {flag}")


def _owner(lock: Path) -> dict | None:
    """What the lock file says about its owner (None when it vanished; {} when it is unreadable)."""
    try:
        record = json.loads(lock.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _alive(owner: dict) -> bool:
    """Whether the owner may still run: its pid is alive on this host, or it runs on another host (unknowable).
    An unreadable lock is no one's (locks are written whole)."""
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _in_use(flag: str, folder: str | os.PathLike, lock: Path, owner: dict) -> UsageError:
    return UsageError(
        f"{flag} {folder} is in use by process {owner.get('pid')} on {owner.get('host')} "
        f"(lock {lock}): wait for that run to end, or choose another {flag}"
    )


def _held_by_this_process(folder: Path) -> bool:
    return any(folder.is_relative_to(held) for held in _held)


def claim_output_folder(
    output_dir: str | os.PathLike,
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    flag: str = "--output_dir",
) -> None:
    """Check that ``output_dir`` overlaps none of the folders the job reads, then lock it for this run.

    ``inputs``: the job's flags that name what it reads, flag → value (:func:`check_no_overlap`). Only the main
    process locks (see :func:`is_main_process`). Re-entrant: a folder this process already holds, or one inside it
    (``mlm-suite seeds`` runs its jobs in subfolders), is not locked again.
    Raises :class:`~mlm_suite.errors.UsageError` for an overlap, or when a live run (of this or another host) holds
    the folder or a folder above it.
    """
    check_no_overlap(output_dir, inputs or {}, flag)
    folder = Path(output_dir).expanduser().resolve()
    if not is_main_process() or _held_by_this_process(folder):
        return
    for above in folder.parents:
        owner = _owner(lock_path(above)) if above != above.parent else None
        if owner and _alive(owner):
            raise _in_use(flag, above, lock_path(above), owner)
    lock = lock_path(folder)
    created = [parent for parent in reversed(lock.parent.parents) if not parent.exists()]
    created += [lock.parent] if not lock.parent.exists() else []
    lock.parent.mkdir(parents=True, exist_ok=True)
    record = lock.with_name(f"{lock.name}.{os.getpid()}")  # written whole, then linked: a lock is never empty
    record.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": sys.argv}) + "\n",
                      encoding="utf-8")
    try:
        for _ in range(2):
            try:
                os.link(record, lock)
            except FileExistsError:
                owner = _owner(lock)
                if owner is None:  # its owner just released it
                    continue
                if _alive(owner):
                    raise _in_use(flag, output_dir, lock, owner) from None
                print(f"mlm_suite: taking over the lock of {flag} {output_dir} ({lock}): its process "
                      f"{owner.get('pid')} is no longer running", file=sys.stderr)
                lock.unlink(missing_ok=True)
                continue
            _held[folder] = _Claim(lock, created)
            return
        raise _in_use(flag, output_dir, lock, _owner(lock) or {})  # taken again by a run that started meanwhile
    except UsageError:
        record.unlink(missing_ok=True)
        _remove_empty(created)
        raise
    finally:
        record.unlink(missing_ok=True)


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders (deepest first) that are still empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


def release_output_folder(folder: str | os.PathLike) -> None:
    """Remove the lock of ``folder`` (if this process holds it) and the parent folders made for it, if empty."""
    claim = _held.pop(Path(folder).expanduser().resolve(), None)
    if claim is None:
        return
    if (_owner(claim.lock) or {}).get("pid") == os.getpid():
        claim.lock.unlink(missing_ok=True)
    _remove_empty(claim.created)


@contextmanager
def output_folders_released() -> Iterator[None]:
    """Within the block, folders claimed are released when it ends, normally or by an exception."""
    before = set(_held)
    try:
        yield
    finally:
        for folder in [folder for folder in _held if folder not in before]:
            release_output_folder(folder)


@atexit.register
def _release_all() -> None:  # claims of jobs whose main was called directly rather than through run_job
    for folder in list(_held):
        release_output_folder(folder)


__all__ = [
    "check_no_overlap",
    "claim_output_folder",
    "is_main_process",
    "lock_path",
    "output_folders_released",
    "release_output_folder",
]
