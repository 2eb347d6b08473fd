"""Where quantized weights are cached: ``$TORCHBURN_CACHE_DIR`` or ``~/.cache/torchburn`` (``llm/``
inside it), one safetensors file per (source files, quant, group size), keyed by a hash of the source
files' names, sizes and modification times, so that a changed checkpoint is re-quantized."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Optional

from .hub import model_files

__all__ = ["cache_root", "cache_entry"]

FORMAT = "torchburn-llm-cache-1"


def cache_root() -> Path:
    """``$TORCHBURN_CACHE_DIR`` or ``$XDG_CACHE_HOME/torchburn`` or ``~/.cache/torchburn``."""
    if os.environ.get("TORCHBURN_CACHE_DIR"):
        return Path(os.environ["TORCHBURN_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "torchburn"


def cache_entry(model_dir: Path, quant: str, group_size: int) -> tuple[Optional[Path], str]:
    """(path of the cache file or None when the cache folder cannot be created, key string)."""
    digest = hashlib.sha256()
    digest.update(f"{FORMAT}\n{quant}\n{group_size if quant == 'int4' else 0}\n".encode())
    for f in model_files(model_dir):
        st = f.stat()
        digest.update(f"{f.resolve()}\n{st.st_size}\n{st.st_mtime_ns}\n".encode())
    key = digest.hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", model_dir.name if model_dir.name not in ("", ".") else "model")
    if model_dir.parent.name == "snapshots":  # HF cache: models--Org--Name/snapshots/<rev>
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", model_dir.parent.parent.name.replace("models--", ""))
    suffix = f"{quant}-g{group_size}" if quant == "int4" else quant
    folder = cache_root() / "llm"
    path = folder / f"{name}-{suffix}-{key[:16]}.safetensors"
    if path.is_file():
        return path, key
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, key
    if not os.access(folder, os.W_OK):
        return None, key
    return path, key
