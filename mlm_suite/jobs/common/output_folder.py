"""Claiming a job's output folder: it must not overlap what the job reads, one run writes it at a time, and it holds
that run alone.

A job calls :func:`claim_output_folder` once its flags are checked, before it writes anything. The claim is a lock
file inside the folder, ``_mlm_suite.lock`` (the folder is made for it and removed again if the run leaves it empty,
so a refused run leaves the folder as it was; names starting with ``_`` are left out of the Trainer's Hub uploads),
holding the owner's pid and host; :func:`~mlm_suite.jobs.common.running.run_job` removes it when the job ends, however
it ends, and interpreter exit removes what is left. A lock whose process no longer runs on this host is taken over
with a printed line.

Then the folder rule (:func:`_start_run`): a folder that holds an earlier run's files is refused unless the run
continues that run from its checkpoints (the earlier run's results, model and card are removed: this run writes its
own) or ``--overwrite_output_dir`` asks for a fresh start (everything is removed). See
docs/command_line.md#what-is-refused-what-is-accepted-and-why.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mlm_suite.errors import PARTIAL_PREFIX, UsageError


@dataclass
class _Claim:
    lock: Path
    created: list[Path] = field(default_factory=list)  # parent folders made for the lock, deepest last


# The folders this process holds, by resolved path.
_held: dict[Path, _Claim] = {}

LOCK_NAME = "_mlm_suite.lock"
# A stopped run's checkpoints, in the folder or in a stage folder of it (hf_baseline/, intermediate/, seed_<n>/).
_CHECKPOINT = re.compile(r"checkpoint-\d+")


def lock_path(folder: str | os.PathLike) -> Path:
    """The lock file of ``folder``: ``_mlm_suite.lock`` inside it (real paths, so every spelling shares one lock)."""
    return Path(folder).expanduser().resolve() / LOCK_NAME


def is_main_process() -> bool:
    """Whether this process writes the outputs: rank 0 of a torchrun or accelerate launch (``RANK``), or alone.

    Read from the launcher's environment because the claim comes before the Trainer sets up the process group.
    """
    return os.environ.get("RANK", "0") == "0"


def check_no_overlap(output_dir: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None],
                     flag: str = "--output_dir") -> None:
    """Refuse an output folder that is, contains or lies inside an input folder: writing it would overwrite or mix
    with what the job reads (``inputs``: flag → value; Hub ids and files are not folders and pass)."""
    given = Path(output_dir).expanduser()
    if given.is_symlink() and not given.exists():
        raise UsageError(f"{flag} {output_dir} is a link to {os.readlink(given)}, which does not exist: create that "
                         f"folder, or choose another {flag}")
    output = given.resolve()
    if output.exists() and not output.is_dir():
        raise UsageError(f"{flag} {output_dir} is a file, not a folder")
    above = next((parent for parent in output.parents if parent.exists()), None)
    if above is not None and not above.is_dir():
        raise UsageError(f"{flag} {output_dir} lies under {above}, which is a file, not a folder: choose another {flag}")
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


def paths_read(*arguments: object) -> dict[str, str]:
    """Every flag of ``arguments`` (a job's data and model argument dataclasses) whose value names an existing file or
    folder, flag → value: what the job reads, so that the folder rule never removes it."""
    found = {}
    for holder in arguments:
        for name, value in vars(holder).items():
            values = value if isinstance(value, (list, tuple)) else [value]
            for number, item in enumerate(values, 1):
                if name != "output_dir" and isinstance(item, (str, os.PathLike)) and str(item) and os.path.exists(item):
                    found[f"--{name}" if len(values) == 1 else f"--{name} #{number}"] = str(item)
    return found


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


#: ``--overwrite_output_dir``'s help, the same in every job.
OVERWRITE_HELP = ("Delete what an earlier run left in the output folder and start anew (by default a folder holding "
                  "an earlier run's files is refused, unless its checkpoint-* folders are continued)")


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
    overwrite: bool = False,
    resume: Callable[[], str | None] | None = None,
) -> str | None:
    """Check that ``output_dir`` overlaps none of the folders the job reads, lock it for this run, and make it hold
    this run alone (the folder rule, :func:`_start_run`; ``overwrite``: the job's ``--overwrite_output_dir``).

    ``inputs``: the job's flags that name what it reads, flag → value (:func:`check_no_overlap`). ``resume``: the job's
    resolution of the checkpoint it continues (:func:`~mlm_suite.jobs.common.checkpoints.resume_checkpoint`), called
    once the folder is checked and locked and before an earlier run's files are removed, so that its refusal (a
    checkpoint of other data) leaves the folder as it was; what it returns is returned. Only the main
    process locks and removes files (see :func:`is_main_process`); every process applies the rule, so all refuse
    alike. Re-entrant: a folder this process already holds, or one inside it (``mlm-suite seeds`` runs its jobs in
    subfolders), is not locked again, but the rule applies to it.
    Raises :class:`~mlm_suite.errors.UsageError` for an overlap, when a live run (of this or another host) holds
    the folder or a folder above it, or when the folder holds an earlier run's files that this run neither continues
    nor may overwrite.
    """
    inputs = inputs or {}
    check_no_overlap(output_dir, inputs, flag)
    folder = Path(output_dir).expanduser().resolve()
    resume = resume or (lambda: None)
    if not is_main_process() or _held_by_this_process(folder):
        return _start_run(folder, output_dir, flag, overwrite, inputs, resume, remove=is_main_process())
    _lock(folder, output_dir, flag)
    try:
        _remove_staging_left(folder)
        return _start_run(folder, output_dir, flag, overwrite, inputs, resume)
    except BaseException:
        release_output_folder(folder)
        raise


def _lock(folder: Path, output_dir: str | os.PathLike, flag: str) -> None:
    """Lock ``folder`` for this process (making it, and its parents, for the lock)."""
    for above in folder.parents:
        owner = _owner(lock_path(above)) if above != above.parent else None
        if owner and _alive(owner):
            raise _in_use(flag, above, lock_path(above), owner)
    lock = lock_path(folder)
    created = [parent for parent in reversed(folder.parents) if not parent.exists()]
    created += [folder] if not folder.exists() else []
    record = lock.with_name(f"{lock.name}.{os.getpid()}")  # written whole, then linked: a lock is never empty
    try:
        folder.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": sys.argv}) + "\n",
                          encoding="utf-8")
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
    except BaseException:  # a refusal, or SIGTERM/Ctrl-C (which may come just after the link made the lock ours)
        if folder not in _held and (_owner(lock) or {}).get("pid") == os.getpid():
            lock.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
        _remove_empty(created)
        raise
    finally:
        record.unlink(missing_ok=True)


def _earlier_files(folder: Path) -> list[Path]:
    """What the folder holds besides the lock (and a lock being written) and the staging folders of killed runs,
    sorted by name."""
    if not folder.is_dir():
        return []
    return sorted(entry for entry in folder.iterdir()
                  if not entry.name.startswith(LOCK_NAME) and not entry.name.startswith(PARTIAL_PREFIX))


def _remove_staging_left(folder: Path) -> None:
    """Remove what killed runs were building in ``folder`` (their staging folders): a run that holds the folder's lock
    is the only one writing it."""
    if folder.is_dir():
        for entry in folder.glob(f"{PARTIAL_PREFIX}*"):
            shutil.rmtree(entry, ignore_errors=True)


def _holds_checkpoints(entries: list[Path]) -> bool:
    """Whether a stopped run's checkpoints are there to continue: ``checkpoint-<step>`` folders among a folder's
    ``entries`` or in one of them (a job's stage, a seed's run)."""
    candidates = [entry for entry in entries if entry.is_dir() and not entry.is_symlink()]
    return any(_CHECKPOINT.fullmatch(entry.name) for entry in candidates) or any(
        _CHECKPOINT.fullmatch(inner.name) and inner.is_dir() for entry in candidates for inner in entry.iterdir()
    )


def _names(entries: list[Path], shown: int = 3) -> str:
    names = [entry.name + ("/" if entry.is_dir() else "") for entry in entries]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _start_run(folder: Path, output_dir: str | os.PathLike, flag: str, overwrite: bool,
               inputs: Mapping[str, str | os.PathLike | None], resume: Callable[[], str | None],
               remove: bool = True) -> str | None:
    """The folder rule: a run's folder holds that run alone.

    * empty or new: the run starts;
    * ``overwrite`` (``--overwrite_output_dir``): everything an earlier run left is removed, and the run starts anew;
    * a stopped run's ``checkpoint-*`` folders (which the job continues: :mod:`mlm_suite.jobs.common.checkpoints`): the
      files at the top of the folder (the earlier results, final model, card and plots) are removed, the
      checkpoints and stage folders stay;
    * any other earlier file: refused, naming it, before anything is written.

    Nothing that the run reads (``inputs``) is ever removed: a file or folder of it inside the folder is refused.
    ``remove=False`` (processes other than the main one) applies the rule without touching the folder. ``resume``
    resolves the checkpoint the run continues once the rule accepted the folder, before anything is removed.
    """
    earlier = _earlier_files(folder)
    if not earlier:
        return resume()
    continues = not overwrite and _holds_checkpoints(earlier)
    if not overwrite and not continues:
        raise UsageError(
            f"{flag} {output_dir} already holds an earlier run's files ({_names(earlier)}), which this run would "
            f"mix with its own: choose another {flag}, or pass --overwrite_output_dir to delete them and start anew"
        )
    if overwrite:
        for name, place in (("the current folder", Path.cwd()), ("your home folder", Path.home())):
            if place.resolve().is_relative_to(folder):
                raise UsageError(f"{flag} {output_dir} holds {name}, which --overwrite_output_dir would delete with "
                                 f"everything in it: choose a folder of the run's own")
    doomed = earlier if overwrite else [entry for entry in earlier if not entry.is_dir() or entry.is_symlink()]
    for input_flag, value in inputs.items():
        source = Path(value).expanduser().resolve() if value else None
        if source is not None and source.exists() and any(source.is_relative_to(entry.resolve()) for entry in doomed):
            raise UsageError(f"{input_flag} {value} lies inside {flag} {output_dir}, whose earlier files this run "
                             f"removes: move it out, or choose another {flag}")
    checkpoint = resume()
    if not remove or not doomed:
        return checkpoint
    for entry in doomed:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    why = "--overwrite_output_dir" if overwrite else "this run continues from its checkpoints and writes its own"
    print(f"mlm_suite: removed the earlier run's {_names(doomed)} from {flag} {output_dir} ({why})", file=sys.stderr)
    return checkpoint


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
    "LOCK_NAME",
    "OVERWRITE_HELP",
    "check_no_overlap",
    "claim_output_folder",
    "is_main_process",
    "lock_path",
    "output_folders_released",
    "paths_read",
    "release_output_folder",
]
