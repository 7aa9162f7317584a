"""Whether output can be written somewhere, tested by writing (``os.access`` says yes to root anywhere)."""
from __future__ import annotations

import tempfile
from pathlib import Path


def write_error(folder: Path) -> OSError | None:
    """The error writing a file into ``folder`` would meet (None: it can be written): makes the
    folders that are missing, writes a temporary file there, and undoes both."""
    folder = Path(folder).absolute()
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    try:
        for f in reversed(missing):
            f.mkdir()
        tempfile.TemporaryFile(dir=missing[0] if missing else folder).close()
        return None
    except OSError as exc:
        return exc
    finally:
        for f in missing:
            if f.exists():
                f.rmdir()
