"""A second device on a machine that has only a CPU: tensors on it are CPU tensors that the guard tracks, and an op
that meets one of them together with a (non-scalar) host tensor raises as CUDA would.

polyrl's first GPU run crashed at its first RL update on ``-advantages * ratio`` (advantages on the host, the ratio
on cuda:0), a bug no CPU test could see: on a CPU both are host tensors. Under :class:`SecondDevice` the model's
parameters, and everything computed from them or moved ``.to(guard.device)``, live on the pretend device
(``guard.device``, reported as ``meta``: ``tensor.device`` says so); tensors made without a device are host tensors.
Mixing the two raises ``RuntimeError: Expected all tensors to be on the same device`` at the line that does it, with
the real numbers computed on the CPU all the while, so a whole SFT step, RL update or evaluation runs to the end
when the code keeps its tensors where they belong. Build the batches inside the guard: a tensor it has not seen
made (before it began, by autograd, by a deep copy) is taken to be on whichever side it meets.

What CUDA allows is allowed: 0-d host tensors (a CPU scalar) with device tensors, host index tensors into a device
tensor, copies across devices (``copy_``, ``to``, slice assignment), ``.item()`` / ``.tolist()`` / ``float()``. What
CUDA refuses is refused, where a looser rule would hide it (issue #42): advanced-index assignment
(``t[index] = values``, an ``index_put_``) of non-scalar values from the other side, and 0-d host tensors in the ops
that join tensors (``cat``, ``stack``). What a CUDA graph capture refuses besides (host syncs) is
``tests/cuda_graph_standin.py``'s to see.
Parameters' gradients are device tensors (a hook tags them as they are accumulated), optimizer states too (built
``*_like`` the parameters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_TAG = "_polyrl_on_device"
_DEVICE_PROPERTY = torch._C.TensorBase.__dict__["device"]
"""``tensor.device``: the mode sees its getter (a new method-wrapper on every access) with this as ``__self__``."""
_DATA_PROPERTY = torch._C.TensorBase.__dict__["data"]
"""``param.data = t`` (what ``Module.to`` does): the parameter goes where ``t`` is."""
DEVICE = torch.device("meta")
"""What the guard reports as the device of the tensors on it (never a real device of this machine)."""

_FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.tensor,
    torch.as_tensor,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.linspace,
    torch.eye,
    torch.empty_strided,
}
_LIKE = {torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like, torch.randn_like}
_MOVES = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu}
_CROSS_DEVICE_OK = {torch.Tensor.copy_, torch._has_compatible_shallow_copy_type}
_READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.__len__,
    torch.Tensor.__repr__,
    torch.Tensor.__format__,
    torch.Tensor.dim,
    torch.Tensor.size,
    torch.Tensor.numel,
    torch.Tensor.data_ptr,
    torch.Tensor.requires_grad_,
    torch.Tensor.backward,
    torch.Tensor.register_hook,
}


class DeviceMismatch(RuntimeError):
    """What the guard raises where CUDA would raise its 'Expected all tensors to be on the same device'."""


def _tag(t, on_device: bool | None):
    if isinstance(t, torch.Tensor) and on_device is not None:
        try:
            setattr(t, _TAG, on_device)
        except (AttributeError, RuntimeError):  # a tensor type that takes no attributes: leave it untracked
            pass
    return t


def _tag_grad(param: torch.Tensor) -> None:
    _tag(param.grad, True)


def on_device(t: torch.Tensor) -> bool | None:
    """True on the guard's device, False on the host, None for a tensor the guard has not seen made (made before
    it began, by autograd, or by a deep copy): such a tensor goes with either."""
    return getattr(t, _TAG, None)


def _is_fake(device) -> bool:
    if isinstance(device, torch.Tensor):
        return bool(on_device(device))
    if isinstance(device, (str, torch.device)):
        return torch.device(device).type in ("meta", "cuda")
    return False


def _device_argument(func, args, kwargs):
    """The device a move or factory asks for, or None."""
    if "device" in kwargs:
        return kwargs["device"]
    if func in (torch.Tensor.cuda,):
        return DEVICE
    if func in (torch.Tensor.cpu,):
        return torch.device("cpu")
    if func is torch.Tensor.to:
        for a in args[1:]:
            if isinstance(a, (str, torch.device, torch.Tensor)):
                return a
    return None


def _real(device):
    """The CPU in place of the pretend device."""
    return torch.device("cpu") if _is_fake(device) else device


class SecondDevice(TorchFunctionMode):
    """Run polyrl's tensor code with ``model`` on a pretend second device (see the module docstring)."""

    device = DEVICE

    def __init__(self):
        super().__init__()
        self.hooks: list = []
        self.checked = 0
        """Ops that met at least one device tensor (how much the guard saw)."""

    def place(self, *modules: torch.nn.Module) -> None:
        """Put ``modules``' parameters and buffers on the pretend device (their gradients follow)."""
        for module in modules:
            for p in module.parameters():
                _tag(p, True)
                if p.requires_grad:
                    self.hooks.append(p.register_post_accumulate_grad_hook(_tag_grad))
                if p.grad is not None:
                    _tag(p.grad, True)
            for b in module.buffers():
                _tag(b, True)

    def close(self) -> None:
        for h in self.hooks:
            h.remove()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is _DEVICE_PROPERTY:
            return DEVICE if on_device(args[0]) else func(*args)
        if getattr(func, "__self__", None) is _DATA_PROPERTY and func.__name__ == "__set__":
            func(*args)
            _tag(args[0], on_device(args[1]))
            return None
        if func in _READS:
            return func(*args, **kwargs)
        if getattr(func, "__name__", "") == "numpy" and on_device(args[0]):
            raise TypeError(
                "can't convert meta device tensor to numpy (polyrl device guard): move it with .cpu() first"
            )
        if func in _MOVES:
            target = _device_argument(func, args, kwargs)
            if target is None:  # a dtype change only
                return _tag(func(*args, **kwargs), on_device(args[0]))
            fake = _is_fake(target)
            if func is torch.Tensor.to:
                args = tuple(_real(a) if isinstance(a, (str, torch.device)) else a for a in args)
                args = tuple(a.to("cpu") if (i and isinstance(a, torch.Tensor)) else a for i, a in enumerate(args))
                if "device" in kwargs:
                    kwargs = {**kwargs, "device": _real(kwargs["device"])}
                out = func(*args, **kwargs)
            else:
                out = args[0] if func is torch.Tensor.cuda else func(*args, **kwargs)
            if out is args[0] and on_device(args[0]) != fake:  # a move to where it is returns the tensor itself
                out = args[0].clone()
            return _tag(out, fake)
        if func in _FACTORIES or func in _LIKE:
            device = kwargs.get("device")
            if func in _LIKE and device is None:
                fake = on_device(args[0])
            else:
                fake = _is_fake(device)
                if fake and kwargs.get("generator") is not None and kwargs["generator"].device.type == "cpu":
                    raise DeviceMismatch("a CPU generator cannot draw numbers on the device (polyrl device guard)")
            if device is not None:
                kwargs = {**kwargs, "device": _real(device)}
            return _tag(func(*args, **kwargs), fake)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        flags = [on_device(t) for t in tensors]
        if any(flags):
            self.checked += 1
            if func is torch.Tensor.__setitem__:
                host = _scattered_across(args) if _advanced(args[1]) else []
            elif func in _CROSS_DEVICE_OK or _host_index(func, args):
                host = []
            else:  # a 0-d host tensor is a scalar to the ops that broadcast, not to those that join tensors
                host = [t for t, f in zip(tensors, flags) if f is False and (t.dim() > 0 or func in _JOINS)]
            if host:
                shapes = ", ".join(str(tuple(t.shape)) for t in host)
                raise DeviceMismatch(
                    f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE} and "
                    f"cpu! ({getattr(func, '__name__', func)} got host tensors of shape {shapes}; polyrl device guard)"
                )
        out = func(*args, **kwargs)
        if func in _CROSS_DEVICE_OK or isinstance(out, torch.Size):  # a shape stays a torch.Size (``.numel()``)
            return out
        # on the device if anything was; on the host if something was and nothing on the device; else unknown
        result = True if any(flags) else False if (False in flags or not tensors) else None
        return tree_map(lambda t: _tag(t, result) if isinstance(t, torch.Tensor) else t, out)


_JOINS = {
    torch.cat,
    torch.concat,
    torch.concatenate,
    torch.stack,
    torch.hstack,
    torch.vstack,
    torch.dstack,
    torch.column_stack,
}
"""Ops that join tensors: every one must be on one device, 0-d ones too (CUDA: ``torch.stack`` of a CUDA scalar and a
CPU one raises)."""


def _advanced(index) -> bool:
    """Whether an index is advanced indexing (a tensor or a list in it), which assigns with ``index_put_``."""
    index = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, (torch.Tensor, list)) for i in index)


def _scattered_across(args) -> list[torch.Tensor]:
    """``target[advanced] = values``: ``index_put_``, which CUDA runs only when the values are where the target is
    (a 0-d host tensor excepted); slice assignment is a copy, which crosses devices. The values that break it."""
    target, value = args[0], args[2]
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return []
    there, here = on_device(target), on_device(value)
    return [value] if there is not None and here is not None and there != here else []


def _host_index(func, args) -> bool:
    """``device_tensor[host_indices]``: CUDA moves the indices (index tensors on the CPU are allowed)."""
    if func is not torch.Tensor.__getitem__:
        return False
    if not on_device(args[0]):
        return False
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    return all(not (isinstance(i, torch.Tensor) and on_device(i)) for i in index)


@contextlib.contextmanager
def second_device(*modules: torch.nn.Module) -> Iterator[SecondDevice]:
    """``with second_device(model) as guard:`` — ``model`` on the pretend device until the block ends (and a deep
    copy of a parameter on it, a KL reference or a critic's trunk, is there too, as on a real device)."""
    guard = SecondDevice()
    guard.place(*modules)
    copy_parameter = torch.nn.Parameter.__deepcopy__

    def deepcopy_in_place(self, memo):
        return _tag(copy_parameter(self, memo), on_device(self))

    torch.nn.Parameter.__deepcopy__ = deepcopy_in_place
    make_parameter = torch.nn.Parameter.__new__

    def parameter_in_place(cls, data=None, requires_grad=True):  # nn.Linear(device=...) wraps a device tensor
        param = make_parameter(cls, data, requires_grad)
        return _tag(param, on_device(data)) if data is not None else param

    torch.nn.Parameter.__new__ = parameter_in_place
    autocast = torch.autocast
    torch.autocast = _HostAutocast  # autocast "on the pretend device" is the CPU's, where the numbers are computed
    try:
        with guard:
            yield guard
    finally:
        torch.nn.Parameter.__deepcopy__ = copy_parameter
        torch.nn.Parameter.__new__ = make_parameter
        torch.autocast = autocast
        guard.close()


class _HostAutocast(torch.autocast):
    def __init__(self, device_type: str, *args, **kwargs):
        super().__init__("cpu" if device_type == DEVICE.type else device_type, *args, **kwargs)
