"""Writing a file so that a reader (a browser, `submit`, a second run) sees the old file or
the new one, never half of one: the text goes to a temporary file beside it, which then
replaces it in one rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> Path:
    """Writes `text` to `path` (folders made as needed); on failure `path` is untouched and
    no temporary file is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".part", delete=False
    )
    try:
        with handle:
            handle.write(text)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return path
