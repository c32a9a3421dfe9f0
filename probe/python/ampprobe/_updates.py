"""_updates.py — how much of an optimizer's update of a 16-bit parameter rounding takes away: a
model cast with .half() or .to(torch.bfloat16) and trained without fp32 master weights loses
every update below half a unit in the last place of the weight it is added to. On a sampled
step the first values of each such parameter are kept as the optimizer begins and compared with
what it wrote, on the device; the counts come back without a sync and are recorded as
weight_update rows (the report's lost-updates rule reads them).
"""
import math

import torch

from ._records import WEIGHT_UPDATE

PLAIN = (torch.Tensor, torch.nn.Parameter)  # a tensor's types that are no wrapper subclass
LOWP = (torch.float16, torch.bfloat16)
# values of each 16-bit parameter compared before and after an optimizer step (a prefix: what
# share of the updates rounding takes away is a property of the dtype and the update's size,
# which a few rows of a weight show as well as all of them)
_UPDATE_PREFIX = 4096


class UpdateCheck:
    """The updates of watcher w's 16-bit parameters compared: before() as an optimizer begins,
    after() once it stepped, record() when the counts are on the host."""

    def __init__(self, w):
        self.w = w
        self._lowp_n, self._lowp_of = -1, {}  # of w._plist's first n: id -> (layer, name,
        # dtype) of its 16-bit plain parameters (_lowp_params)
        self._snap = None  # the 16-bit parameters as an optimizer began its update
        self._pending = []  # updates compared, their counts on the way to the host
        self._segments = ((), None)  # the segment ids of the last sizes compared
        self._hooked = set()  # ids of the optimizers hooked (hook)

    def _lowp_params(self):
        """id -> (layer, name, dtype) of the recorded parameters stored in fp16 or bf16: those
        an optimizer updates in place of fp32 master weights (a model cast with .half() or
        .to(torch.bfloat16)). Sharded ones (DTensors) are left out."""
        w = self.w
        if self._lowp_n != len(w._plist):
            self._lowp_n = len(w._plist)
            self._lowp_of = {id(p): (lid, name, dtype) for p, (lid, _, name, dtype)
                             in zip(w._plist, w._wentries)
                             if p.dtype in LOWP and type(p) in PLAIN}
        return self._lowp_of

    def hook(self, optimizer):
        """The optimizer a GradScaler's step() was handed, where watch() knows no optimizer:
        hooked once, so that its updates of 16-bit parameters are compared too."""
        if id(optimizer) in self._hooked:
            return
        self._hooked.add(id(optimizer))
        w = self.w
        w._handles.append(optimizer.register_step_pre_hook(
            lambda o, args, kwargs: w._before_update(o, args, kwargs)))
        w._handles.append(optimizer.register_step_post_hook(
            lambda o, args, kwargs: self.after(o)))

    def drop(self):
        """An optimizer begins an update that is not compared (a step without statistics)."""
        self._snap = None

    def before(self, optimizer, step, args=(), kwargs=None):
        """An optimizer is about to update parameters on sampled step `step`: of the 16-bit ones
        it updates (_lowp_params) with a gradient, keeps the first _UPDATE_PREFIX values and
        which of them have a non-zero gradient, for after(). Not for a step() handed a closure
        (its gradients are made inside it), nor for a parameter group whose learning rate is 0
        (a warm-up's first step: no update is meant)."""
        self._snap = None
        mine = self._lowp_params()
        if not mine or (kwargs or {}).get("closure") is not None or \
                (len(args) > 1 and args[1] is not None):
            return
        ps, rows = [], []
        for group in optimizer.param_groups:
            lr = group.get("lr")
            if isinstance(lr, torch.Tensor):  # (read only where that costs no sync)
                lr = None if lr.is_cuda else float(lr)
            if lr == 0:
                continue
            for p in group["params"]:
                row = mine.get(id(p))
                if row is not None and p.grad is not None and not p.grad.is_sparse:
                    ps.append(p)
                    rows.append(row)
        if not ps:
            return
        with torch.no_grad():
            before = torch.cat([p.detach().reshape(-1)[:_UPDATE_PREFIX] for p in ps])
            moving = torch.cat([p.grad.detach().reshape(-1)[:_UPDATE_PREFIX] for p in ps]) != 0
        self._snap = (optimizer, step, ps, rows, before, moving)

    def after(self, optimizer):
        """The optimizer stepped: counts, per parameter kept by before(), the values with a
        non-zero gradient that the update left as they were (rounded back to the weight: an
        update below half a unit in its last place), on the device, and starts the counts on
        their way to the host (recorded by record())."""
        snap, self._snap = self._snap, None
        if snap is None or snap[0] is not optimizer:
            return
        _, step, ps, rows, before, moving = snap
        sizes = tuple(min(p.numel(), _UPDATE_PREFIX) for p in ps)
        dev = moving.device
        with torch.no_grad():
            after = torch.cat([p.detach().reshape(-1)[:_UPDATE_PREFIX] for p in ps])
            kept = (after == before) & moving
            if self._segments[0] != sizes or self._segments[1].device != dev:
                seg = torch.repeat_interleave(
                    torch.arange(len(sizes), device=dev), torch.tensor(sizes, device=dev),
                    output_size=sum(sizes))  # (output_size: no sync)
                self._segments = (sizes, seg)
            seg = self._segments[1]
            counts = torch.zeros(2, len(ps), dtype=torch.int32, device=dev)
            counts[0].index_add_(0, seg, kept.to(torch.int32))
            counts[1].index_add_(0, seg, moving.to(torch.int32))
            host = counts.to("cpu", non_blocking=True)
            done = None
            if dev.type == "cuda":
                done = torch.cuda.Event()
                done.record()
        self._pending.append((step, rows, host, done))

    def record(self, wait):
        """Records the updates compared whose counts have reached the host (wait: all of them):
        a weight_update row per parameter, numel the values compared (a non-zero gradient),
        n_zero those the update left unchanged."""
        while self._pending:
            step, rows, host, done = self._pending[0]
            if done is not None and not done.query():
                if not wait:
                    return
                done.synchronize()
            self._pending.pop(0)
            lost, moving = host.tolist()
            for (layer, name, dtype), k, n in zip(rows, lost, moving):
                if n:
                    self.w.rec.tensor_stats(step, layer, name, WEIGHT_UPDATE, dtype, None, n,
                                            math.nan, math.nan, math.nan, -1, -1, -1, -1, -1, k)
