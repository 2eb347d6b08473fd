"""Where quantized weights are cached: ``$TORCHBURN_CACHE_DIR`` or ``~/.cache/torchburn`` (``llm/``
inside it), one safetensors file per (source files, quant, group size).

The key fingerprints every source file: its path, size, modification *and* change times, inode and
device (a rewrite changes the change time even when the size and modification time are forged back),
plus a hash of its safetensors header and of 16 blocks of 4 KiB spread over its data (a rewrite with
other weights changes them). The C loader then checks each cached tensor against its BLAKE3 digest,
so a damaged cache file is rebuilt rather than used (``load_stats["cache"] == "rebuilt"``).

Temporary files of writers that died (``<name>.tmp-<pid>-<n>``, left by a SIGKILL during the write) are
removed before a new write."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Optional

from .hub import model_files

__all__ = ["cache_root", "cache_entry", "remove_stale_temp_files"]

FORMAT = "torchburn-llm-cache-2"
SAMPLES = 16
SAMPLE_BYTES = 4096
MAX_HEADER_BYTES = 100 << 20

_TEMP = re.compile(r"\.tmp-(\d+)-\d+$")


def cache_root() -> Path:
    """``$TORCHBURN_CACHE_DIR`` or ``$XDG_CACHE_HOME/torchburn`` or ``~/.cache/torchburn``."""
    if os.environ.get("TORCHBURN_CACHE_DIR"):
        return Path(os.environ["TORCHBURN_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "torchburn"


def _fingerprint(path: Path, digest) -> None:
    """Feeds path's identity and sampled content into digest. Opened non-blocking and checked to be a
    regular file on the descriptor, so a FIFO swapped in never blocks (the loader reports it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        digest.update(f"{path}\nunreadable {error.errno}\n".encode())
        return
    try:
        st = os.fstat(fd)
        digest.update(f"{path.resolve()}\n{st.st_size}\n{st.st_mtime_ns}\n{st.st_ctime_ns}\n{st.st_ino}\n"
                      f"{st.st_dev}\n".encode())
        if not stat.S_ISREG(st.st_mode) or path.suffix != ".safetensors" or st.st_size < 8:
            return
        header = int.from_bytes(os.pread(fd, 8, 0), "little")
        if header > min(MAX_HEADER_BYTES, st.st_size - 8):
            return
        digest.update(os.pread(fd, header, 8))
        start, span = 8 + header, st.st_size - 8 - header
        for i in range(SAMPLES if span > 0 else 0):
            digest.update(os.pread(fd, SAMPLE_BYTES, start + span * i // SAMPLES))
    finally:
        os.close(fd)


def cache_entry(model_dir: Path, quant: str, group_size: int) -> tuple[Optional[Path], str]:
    """(path of the cache file, key string). The folder is created when it can be; when it cannot be
    written the load reports ``cache == "write_failed"`` with the reason (and warns unless quiet)."""
    digest = hashlib.sha256()
    digest.update(f"{FORMAT}\n{quant}\n{group_size if quant == 'int4' else 0}\n".encode())
    for f in model_files(model_dir):
        _fingerprint(f, digest)
    key = digest.hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", model_dir.name if model_dir.name not in ("", ".") else "model")
    if model_dir.parent.name == "snapshots":  # HF cache: models--Org--Name/snapshots/<rev>
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", model_dir.parent.parent.name.replace("models--", ""))
    suffix = f"{quant}-g{group_size}" if quant == "int4" else quant
    folder = cache_root() / "llm"
    path = folder / f"{name}-{suffix}-{key[:16]}.safetensors"
    if os.path.lexists(path):
        return path, key
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # the write then fails with the reason, and the load warns
    return path, key


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temp_files(cache_path: Path) -> list[Path]:
    """Removes ``<cache_path>.tmp-<pid>-<n>`` files whose writer process is gone; returns them."""
    removed = []
    try:
        candidates = list(cache_path.parent.glob(cache_path.name + ".tmp-*"))
    except OSError:
        return removed
    for candidate in candidates:
        match = _TEMP.search(candidate.name)
        if match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        try:
            candidate.unlink()
            removed.append(candidate)
        except OSError:
            pass
    return removed
