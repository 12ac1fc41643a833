"""Files replaced whole: a writer works on a temporary file beside the target
and renames it over the target when done, so no reader (in this process or
another) sees a partial file. Only the standard library: cheap to import where
a package writes one file (the model hub assembling a GGUF)."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` for the block to write, renamed over
    ``path`` when the block ends without an error (removed when it fails): no
    reader, in this process or another, sees a partial file, and tensors still
    mapped from the old file keep their data. The temporary name,
    ``.NAME.PID.RANDOM.tmp``, names its writer, so that the next write of the
    same path removes those a killed writer left behind."""
    path = Path(path)
    _remove_stale_temporaries(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(8).hex()}.tmp")  # (secrets: 7 ms of imports)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_write(path):
    """A new file object whose contents replace ``path`` only once fully
    written and closed (see atomic_path): a failed save leaves no partial file."""
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        yield f


def _remove_stale_temporaries(path: Path) -> None:
    """Deletes the temporary files of ``path`` whose writer process is gone
    (never those of a live one: a pid reused since only keeps a stale file)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.([1-9][0-9]*)\.[0-9a-f]+\.tmp")
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            found = pattern.fullmatch(entry.name)
            if found and not _alive(int(found[1])):
                with contextlib.suppress(OSError):  # another save may have removed it first
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # Windows' os.kill(pid, 0) would send CTRL_C_EVENT: keep every file
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except PermissionError:
        return True  # another user's
    except (ProcessLookupError, OverflowError):
        return False
    return True
