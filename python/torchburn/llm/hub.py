"""Finding a model folder: a local path, or a Hugging Face repo id resolved inside the local Hub cache
(``models--Org--Name/snapshots/<revision>/``), honouring ``HF_HUB_CACHE`` and ``HF_HOME``.

Nothing here touches the network unless ``local_files_only=False`` *and* ``huggingface_hub`` is
installed; every failure names the places that were searched and how to fetch the model.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

__all__ = ["ModelNotFoundError", "hub_cache_dir", "resolve_model_path", "model_files"]

PathLike = Union[str, "os.PathLike[str]"]


class ModelNotFoundError(FileNotFoundError, ValueError):
    """The model folder, or a file it needs, is missing (both a FileNotFoundError and a ValueError)."""


def hub_cache_dir(cache_dir: Optional[PathLike] = None) -> Path:
    """The Hub cache folder: ``cache_dir``, else ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub`` (``$XDG_CACHE_HOME`` honoured), as ``huggingface_hub`` does."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _looks_like_repo_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~", "/"))


def _snapshot_in_cache(repo_id: str, cache: Path, revision: str) -> Optional[Path]:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
        candidate = snapshots / commit
        if (candidate / "config.json").is_file():
            return candidate
    candidate = snapshots / revision  # a commit hash given directly
    if (candidate / "config.json").is_file():
        return candidate
    # no usable ref: the most recently modified snapshot that has a config
    found = [p for p in snapshots.iterdir() if (p / "config.json").is_file()]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_model_path(
    model_id_or_path: PathLike,
    cache_dir: Optional[PathLike] = None,
    local_files_only: bool = True,
    revision: str = "main",
) -> Path:
    """Returns the folder holding ``config.json`` for a local path or a Hub repo id.

    Raises :class:`ModelNotFoundError` (a ``FileNotFoundError`` and a ``ValueError``) saying where it
    looked and how to download the model when it is not there.
    """
    if not isinstance(model_id_or_path, (str, os.PathLike)):
        raise TypeError(f"model_id_or_path must be a str or path, not {type(model_id_or_path).__name__}")
    text = os.fspath(model_id_or_path)
    if not text:
        raise ValueError("model_id_or_path is empty")
    local = Path(text).expanduser()
    if local.is_dir():
        if not os.path.lexists(local / "config.json"):  # a FIFO or folder there is reported by the C reader
            raise ModelNotFoundError(f"{str(local)!r} is a folder but has no config.json (not a Hugging Face model folder)")
        return local.resolve()
    if local.exists():
        raise ModelNotFoundError(f"{str(local)!r} is a file; pass the model folder that holds config.json")
    cache = hub_cache_dir(cache_dir)
    if _looks_like_repo_id(text):
        found = _snapshot_in_cache(text, cache, revision)
        if found is not None:
            return found
        if not local_files_only:
            try:
                from huggingface_hub import snapshot_download  # type: ignore
            except ImportError:
                snapshot_download = None
            if snapshot_download is not None:
                path = snapshot_download(
                    text,
                    revision=revision,
                    cache_dir=str(cache),
                    allow_patterns=["*.json", "*.safetensors", "*.jinja", "tokenizer*"],
                )
                return Path(path)
        where = cache / ("models--" + text.replace("/", "--"))
        raise ModelNotFoundError(
            f"model {text!r} was not found: no local folder {str(local)!r}, and no snapshot with a config.json in "
            f"the Hugging Face cache at {str(where)!r} (cache from cache_dir, HF_HUB_CACHE or HF_HOME). "
            f"Download it first, e.g. `huggingface-cli download {text}` (or `hf download {text}`), "
            "or pass the path of a local model folder."
        )
    raise ModelNotFoundError(
        f"model folder {str(local)!r} does not exist (and {text!r} is not an 'Org/Name' Hugging Face repo id)"
    )


def model_files(folder: Path) -> list[Path]:
    """The files a model load reads (config, generation config, weights, index), for cache keys."""
    names = ["config.json", "generation_config.json", "model.safetensors.index.json"]
    files = [folder / n for n in names if (folder / n).is_file()]
    files += sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    return files
