"""Registers the ``"torchburn"`` Dynamo backend as part of ``import torchburn``, without importing torch.

PyTorch finds a backend named in ``torch.compile(m, backend="torchburn")`` through its registry; when
the name is only known from the package's ``torch_dynamo_backends`` entry point, every thread that
compiles before the first one finishes registers it again and fails with ``duplicate name``
(the registry has no lock). Registering before any compile removes that window:

* if the registry module is already imported, the backend is registered at once;
* otherwise a one-shot import hook registers it right after the registry module executes
  (``import torchburn`` stays light: torch and Dynamo are not imported here, and torch stays optional).

The registered callable is :func:`torchburn_backend`, a thin proxy that imports
:mod:`torchburn.backend` on its first call (that module needs torch). :func:`register` takes a lock,
so concurrent ``torchburn.register()`` / ``torchburn.compile()`` calls are safe too.
"""
from __future__ import annotations

import importlib.machinery
import sys
import threading
from typing import Any, Callable, Optional

REGISTRY = "torch._dynamo.backends.registry"
_lock = threading.RLock()


def torchburn_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
    """The ``"torchburn"`` Dynamo backend (imports :mod:`torchburn.backend` on first use)."""
    from .backend import torchburn_backend as backend

    return backend(gm, example_inputs, **kwargs)


def register_into(registry: Any, name: str = "torchburn", compiler_fn: Optional[Callable] = None) -> None:
    """Adds `compiler_fn` (default: the proxy) to Dynamo's registry under `name` unless a backend of
    that name is there already. Thread-safe."""
    with _lock:
        if name not in registry._COMPILER_FNS:
            registry.register_backend(compiler_fn=compiler_fn or torchburn_backend, name=name)


class _RegisterAfterImport:
    """A meta-path finder that wraps the loader of Dynamo's registry module once, so the backend is
    registered as soon as that module has executed (before any torch.compile can look it up)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != REGISTRY:
            return None
        _remove_hook()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            try:
                register_into(module)
            except Exception:  # noqa: BLE001 - never break torch's import; the entry point still works
                pass

        spec.loader.exec_module = exec_module
        return spec


_hook: Optional[_RegisterAfterImport] = None


def _remove_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None and _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None


def install() -> None:
    """Registers now if Dynamo's registry is loaded, else arranges registration when it loads."""
    global _hook
    registry = sys.modules.get(REGISTRY)
    if registry is not None:
        try:
            register_into(registry)
        except Exception:  # noqa: BLE001 - a broken torch must not break `import torchburn`
            pass
        return
    with _lock:
        if _hook is None:
            _hook = _RegisterAfterImport()
            sys.meta_path.insert(0, _hook)
