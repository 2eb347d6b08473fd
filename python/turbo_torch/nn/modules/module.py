"""nn.Module and nn.Parameter with PyTorch's semantics: registration through __setattr__, named
iteration with de-duplication, state_dict / load_state_dict with PyTorch's key names and messages,
train/eval, zero_grad, to, apply, requires_grad_, forward hooks, and PyTorch's repr."""
from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from torchburn import _C

import turbo_torch as _tt

Tensor = _C.EagerTensor


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter (a leaf with requires_grad=True by default)."""

    def __new__(cls, data: Optional[Tensor] = None, requires_grad: bool = True) -> "Parameter":
        if data is None:
            data = _tt.empty(0)
        return _C._tt_make_subclass(cls, data.detach(), requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + Tensor.__repr__(self)

    def __deepcopy__(self, memo: dict) -> "Parameter":
        result = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol: int) -> Any:
        return (Parameter, (self.detach(), self.requires_grad))


class Buffer:
    """Marks a tensor as a buffer when assigned to a Module attribute (torch.nn.Buffer)."""

    def __init__(self, data: Tensor, persistent: bool = True) -> None:
        self.data = data
        self.persistent = persistent


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class _Keys(_IncompatibleKeys):
    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * spaces + line for line in lines)


# Bumped by every change of any module's parameters, buffers, submodules, hooks, training flag or
# other attributes: turbo_torch.compile re-reads what it caches about a module only when this moved.
generation = [0]


class _Members(OrderedDict):
    """A Module's _parameters / _buffers / _modules table that mirrors every entry into the owner's
    __dict__, so `self.weight` in forward is a plain attribute hit instead of a __getattr__ call. All
    writes (also direct ones such as `module._parameters["w"] = p`) go through these methods."""

    __slots__ = ("_owner",)

    def __init__(self, owner: "Module") -> None:
        super().__init__()
        self._owner = owner

    def __setitem__(self, key: str, value: Any) -> None:
        OrderedDict.__setitem__(self, key, value)
        self._owner.__dict__[key] = value
        generation[0] += 1

    def __delitem__(self, key: str) -> None:
        OrderedDict.__delitem__(self, key)
        self._owner.__dict__.pop(key, None)
        generation[0] += 1

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self._owner.__dict__.pop(key, None)
            generation[0] += 1
        return OrderedDict.pop(self, key, *default)

    def clear(self) -> None:
        for key in list(self):
            self._owner.__dict__.pop(key, None)
        OrderedDict.clear(self)
        generation[0] += 1

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in OrderedDict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self, last: bool = True) -> Any:
        key, value = OrderedDict.popitem(self, last)
        self._owner.__dict__.pop(key, None)
        generation[0] += 1
        return key, value

    def __reduce__(self) -> Any:
        return (OrderedDict, (list(self.items()),))


class Module:
    """Base class of all layers (torch.nn.Module)."""

    training: bool
    _version: int = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", _Members(self))
        object.__setattr__(self, "_buffers", _Members(self))
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", _Members(self))
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks_with_kwargs", OrderedDict())
        object.__setattr__(self, "_forward_hooks_always_called", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        object.__setattr__(self, "_hook_id", 0)

    # ---- forward ----
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._forward_pre_hooks and not self._forward_hooks:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        """torch's Module._call_impl: pre-hooks (with_kwargs ones get and may replace (args, kwargs)), forward,
        forward hooks (with_kwargs ones also see kwargs); always_call hooks run even when forward raises."""
        output = None
        called: set = set()
        try:
            for hook_id, hook in list(self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    result = hook(self, args, kwargs)
                    if result is not None:
                        if not (isinstance(result, tuple) and len(result) == 2):
                            raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                               f"new_kwargs), but got {result}.")
                        args, kwargs = result
                else:
                    result = hook(self, args)
                    if result is not None:
                        args = result if isinstance(result, tuple) else (result,)
            output = self.forward(*args, **kwargs)
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called:
                    called.add(hook_id)
                output = self._run_forward_hook(hook_id, hook, args, kwargs, output)
            return output
        except Exception:
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id not in self._forward_hooks_always_called or hook_id in called:
                    continue
                try:
                    output = self._run_forward_hook(hook_id, hook, args, kwargs, output)
                except Exception as error:
                    warnings.warn("module forward hook with ``always_call=True`` raised an exception that was "
                                  f"silenced as another error was raised in forward: {error}")
            raise

    def _run_forward_hook(self, hook_id: int, hook: Callable, args: tuple, kwargs: dict, output: Any) -> Any:
        if hook_id in self._forward_hooks_with_kwargs:
            result = hook(self, args, kwargs, output)
        else:
            result = hook(self, args, output)
        return output if result is None else result

    def _add_hook(self, table: OrderedDict, hook: Callable, extra: tuple = ()) -> "_RemovableHandle":
        generation[0] += 1
        hook_id = self._hook_id
        object.__setattr__(self, "_hook_id", hook_id + 1)
        table[hook_id] = hook
        for flags in extra:
            flags[hook_id] = True
        return _RemovableHandle(table, hook_id, extra)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> Any:
        """hook(module, args, output) or, with_kwargs=True, hook(module, args, kwargs, output); a non-None
        result replaces the output. always_call=True also runs it when forward raises."""
        extra = ((self._forward_hooks_with_kwargs,) if with_kwargs else ()) + \
            ((self._forward_hooks_always_called,) if always_call else ())
        handle = self._add_hook(self._forward_hooks, hook, extra)
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False) -> Any:
        """hook(module, args) returning None or new args, or, with_kwargs=True, hook(module, args, kwargs)
        returning None or a (new_args, new_kwargs) pair."""
        handle = self._add_hook(self._forward_pre_hooks, hook,
                                (self._forward_pre_hooks_with_kwargs,) if with_kwargs else ())
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    # ---- registration ----
    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"parameter name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('parameter name can\'t contain "."')
        if name == "":
            raise KeyError('parameter name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"buffer name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('buffer name can\'t contain "."')
        if name == "":
            raise KeyError('buffer name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self.__dict__.pop(name, None)
            self._buffers.pop(name, None)
            self._modules.pop(name, None)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self.__dict__.pop(name, None)
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = value
            return
        if isinstance(value, Buffer):
            self.register_buffer(name, value.data, value.persistent)
            return
        buffers = self.__dict__.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)
        generation[0] += 1

    def __getattr__(self, name: str) -> Any:  # members are mirrored in __dict__; this is the slow path
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> List[str]:
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def get_submodule(self, target: str) -> "Module":
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{type(module).__name__} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if name not in module._parameters:
            raise AttributeError(f"{type(module).__name__} has no parameter `{name}`")
        return module._parameters[name]

    # ---- iteration ----
    def named_modules(self, memo: Optional[Set[int]] = None, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[Tuple[str, "Module"]]:
        if memo is None:
            memo = set()
        if id(self) in memo and remove_duplicate:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def _named_members(self, table: str, prefix: str, recurse: bool, remove_duplicate: bool = True
                       ) -> Iterator[Tuple[str, Tensor]]:
        seen: Set[int] = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                         ) -> Iterator[Tuple[str, Parameter]]:
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                      ) -> Iterator[Tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    # ---- state ----
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buffer if keep_vars else buffer.detach()

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> dict:
        if args:  # the deprecated positional form (destination, prefix, keep_vars)
            destination = args[0] if len(args) > 0 else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict: dict, prefix: str, strict: bool, missing: list, unexpected: list,
                              errors: list) -> None:
        local = {**{k: v for k, v in self._parameters.items() if v is not None},
                 **{k: v for k, v in self._buffers.items() if v is not None and k not in self._non_persistent_buffers_set}}
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(value)}")
                continue
            if tuple(value.shape) != tuple(param.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape {value.shape} from checkpoint, "
                              f"the shape in current model is {param.shape}.")
                continue
            with _tt.no_grad():
                param.copy_(value)
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    rest = key[len(prefix):]
                    head = rest.split(".", 1)[0]
                    if head not in self._modules and head not in local:
                        unexpected.append(key)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False) -> Any:
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list = []
        unexpected: list = []
        errors: list = []

        def load(module: Module, prefix: str) -> None:
            module._load_from_state_dict(state_dict, prefix, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
        load(self, "")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                    "\n\t".join(errors)))
        return _Keys(missing if strict else [], unexpected if strict else [])

    # ---- modes and conversions ----
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        generation[0] += 1
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.parameters():
            if param.grad is not None:
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.zero_()

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> "Module":
        for module in self.children():
            module._apply(fn)
        for name, param in self._parameters.items():
            if param is not None:
                with _tt.no_grad():
                    new = fn(param)
                if new is not param:
                    self._parameters[name] = Parameter(new, param.requires_grad)
        for name, buffer in self._buffers.items():
            if buffer is not None:
                self._buffers[name] = fn(buffer)
        return self

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        dtype = kwargs.get("dtype")
        for a in args:
            if isinstance(a, _tt.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
        if dtype is None:
            return self
        if not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
        return self._apply(lambda t: t.to(dtype) if t.dtype.is_floating_point else t)

    def float(self) -> "Module":
        return self.to(_tt.float32)

    def double(self) -> "Module":
        return self.to(_tt.float64)

    def half(self) -> "Module":
        return self.to(_tt.float16)

    def bfloat16(self) -> "Module":
        return self.to(_tt.bfloat16)

    def cpu(self) -> "Module":
        return self

    def type(self, dst_type: Any) -> "Module":
        return self.to(dst_type)

    # ---- repr ----
    def extra_repr(self) -> str:
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = lines + child_lines
        text = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not child_lines:
                text += lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"

    def __getstate__(self) -> dict:
        return self.__dict__.copy()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for table in ("_parameters", "_buffers", "_modules"):  # copies arrive as plain dicts: mirror again
            members = _Members(self)
            for key, value in state.get(table, {}).items():
                members[key] = value
            object.__setattr__(self, table, members)


class _RemovableHandle:
    def __init__(self, table: OrderedDict, hook_id: int, extra: tuple = ()) -> None:
        self._table = table
        self._extra = extra  # the flag tables (with_kwargs, always_call) that also hold this id
        self.id = hook_id

    def remove(self) -> None:
        self._table.pop(self.id, None)
        generation[0] += 1
        for flags in self._extra:
            flags.pop(self.id, None)

    def __enter__(self) -> "_RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
