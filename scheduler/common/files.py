"""Opening files that sit in directories users own (job logs), from a service that may be
root: never through a symlink, a hard link or a special file a user put in their place."""

from __future__ import annotations

import errno
import os
import stat


def open_own_file(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` for a plain file with no other name: symlinks are not followed
    (``O_NOFOLLOW``), a FIFO cannot block the caller (``O_NONBLOCK``), and a file that is not
    regular or has another hard link (``st_nlink`` > 1: the same file under a name the user
    chose, perhaps someone else's) is refused with ``EMLINK``. Raises OSError."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(errno.EMLINK, "not a plain file of its own (a link or a device)", path)
    except BaseException:
        os.close(fd)
        raise
    return fd
