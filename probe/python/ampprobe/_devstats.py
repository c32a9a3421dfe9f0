"""_devstats.py — a step's tensor statistics on the GPU, read back with one copy (needs torch).

libampcore's fused statistics kernel (libampcore/src/cuda/cuda-stats.cu), built for the bridge as
libampstats_cuda.so (probe/python/ampstats.cu), runs on a tensor's memory on PyTorch's current
stream: one launch per tensor (or one for a list of them), adding the tensor's figures (min, max,
NaN, +inf, -inf, overflow, underflow and zero counts, sum of squares) into a slot of a device
buffer owned here. Nothing waits: finish() starts one copy of the used slots into pinned host
memory at the end of a step and empties them for the next one; its result() waits for it, by
then (a step later) long done.

The slots are amp_stats (libampcore/include/amp.h, mirrored in _records.py); the module reports its size
and a module that disagrees is not used. Tensors not on a GPU, and every tensor when the module
cannot be loaded, go through eager torch reductions instead (several kernels per tensor).
"""
import ctypes
import os

import torch

from . import _records

MODULE = "libampstats_cuda.so"
_INF = float("inf")

# amp_dtype codes
_AMP_DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3,
              torch.int64: 4}
TARGET_CODE = {"f32": 0, "f16": 1, "bf16": 2}


_Slot = _records.AmpStats
_SLOT = ctypes.sizeof(_Slot)


def load_module(next_to):
    """The loaded libampstats_cuda.so from next_to's folder (or $AMPPROBE_STATS_MODULE), or
    (None, why)."""
    path = os.environ.get("AMPPROBE_STATS_MODULE") or os.path.join(
        os.path.dirname(os.path.abspath(next_to)), MODULE)
    if not os.path.isfile(path):
        return None, "%s not found (the build has no CUDA: -DAMP_WITH_CUDA=ON)" % path
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        return None, "cannot load %s: %s" % (path, e)
    lib.ampstats_slot_bytes.restype = ctypes.c_int
    if lib.ampstats_slot_bytes() != _SLOT:
        return None, "%s: slot size %d, expected %d (a stale build?)" % (
            path, lib.ampstats_slot_bytes(), _SLOT)
    u, i64, i = ctypes.c_size_t, ctypes.c_int64, ctypes.c_int
    lib.ampstats_one.argtypes = [u, i64, i, u, i, u]
    lib.ampstats_one.restype = i
    lib.ampstats_many.argtypes = [i, ctypes.POINTER(u), ctypes.POINTER(i64),
                                  ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(u), i, u]
    lib.ampstats_many.restype = i
    lib.ampstats_reset.argtypes = [u, i64, u]
    lib.ampstats_reset.restype = i
    lib.ampstats_error.argtypes = [i]
    lib.ampstats_error.restype = ctypes.c_char_p
    return lib, None


def _raw_stream(device_index):
    """The current stream of a GPU as an integer handle."""
    return torch.cuda.current_stream(device_index).cuda_stream


_raw_stream_fast = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_stream


def eager_stats(x, fmax, tiny):
    """The same ten figures as one float64 tensor on x's device, by eager torch reductions: min,
    max (+inf/-inf when none is finite), NaN, +inf, -inf, overflow, underflow, zero counts, numel,
    sum of squares. For tensors off the GPU, and when the module is missing."""
    v = x.detach().reshape(-1).float()
    fin = torch.isfinite(v)
    a = v.abs()
    f = torch.where(fin, v, 0.0)
    return torch.stack([
        torch.where(fin, v, _INF).amin().double(),
        torch.where(fin, v, -_INF).amax().double(),
        torch.isnan(v).sum().double(),
        (v == _INF).sum().double(),
        (v == -_INF).sum().double(),
        (fin & (a >= fmax)).sum().double(),
        ((a < tiny) & (v != 0)).sum().double(),
        (v == 0).sum().double(),
        torch.tensor(float(v.numel()), dtype=torch.float64, device=v.device),
        (f.double() * f.double()).sum(),
    ])


class Figures:
    """One tensor's finished figures."""
    __slots__ = ("numel", "min", "max", "amax", "n_nan", "n_posinf", "n_neginf", "n_overflow",
                 "n_underflow", "n_zero", "sumsq")

    def __init__(self, numel, mn, mx, nan, pinf, ninf, over, under, zero, sumsq):
        self.numel = int(numel)
        if mn <= mx:
            self.min, self.max, self.amax = mn, mx, max(abs(mn), abs(mx))
        else:  # no finite value
            self.min = self.max = self.amax = None
        self.n_nan, self.n_posinf, self.n_neginf = int(nan), int(pinf), int(ninf)
        self.n_overflow, self.n_underflow, self.n_zero = int(over), int(under), int(zero)
        self.sumsq = sumsq

    @property
    def nonfinite(self):
        return self.n_nan + self.n_posinf + self.n_neginf


class StepStats:
    """The statistics queued during one step, on one GPU: add()/add_many() queue them, finish()
    starts their copy to the host (with some extra scalars) and empties the slots for the next
    step; its Copy gives them back as Figures in the order they were queued. A tensor on another
    device than the step's first one, or off the GPU, goes the eager way."""

    def __init__(self, lib, capacity=256):
        self.lib = lib
        self.cap = capacity
        self.buf = None  # uint8 device tensor of cap slots (allocated at first use)
        self._base, self._dev = 0, -1  # its address and device index
        self._one = lib.ampstats_one if lib is not None else None
        self.used = 0
        self.retired = []  # buffers outgrown this step: kept until read() (queued kernels)
        self.eager = []  # figures tensors of the eager path
        self.order = []  # per handle: slot index (>= 0) or ~eager index

    def _slots(self, device, n):
        """The index of the first of n fresh slots on device (the buffer grows as needed: slot
        addresses are only valid until the next call). Moves to device only when no slot is in
        use (add() sees to that)."""
        if self.buf is None or self.buf.device != device:
            while self.cap < n:
                self.cap *= 2
            self.buf = torch.empty(self.cap * _SLOT, dtype=torch.uint8, device=device)
            self._base, self._dev = self.buf.data_ptr(), self.buf.get_device()
            self._reset(0, self.cap)
            self.used = 0
        elif self.used + n > self.cap:
            old = self.buf
            while self.used + n > self.cap:
                self.cap *= 2
            self.buf = torch.empty(self.cap * _SLOT, dtype=torch.uint8, device=device)
            self._base = self.buf.data_ptr()
            self.buf[: old.numel()].copy_(old)
            self._reset(self.used, self.cap - self.used)
            self.retired.append(old)
        first = self.used
        self.used += n
        self.order.extend(range(first, first + n))
        return first

    def buf_addr(self, i):
        return self._base + i * _SLOT

    def _reset(self, first, n):
        self._check(self.lib.ampstats_reset(self._base + first * _SLOT, n,
                                            _raw_stream_fast(self._dev)))

    def _check(self, rc):
        if rc:
            raise RuntimeError("ampprobe: statistics kernel: " +
                               self.lib.ampstats_error(rc).decode())

    def add(self, t, target, bounds):
        """Queues t's statistics relative to target ('f16', 'bf16', 'f32'; bounds its
        (overflow, tiny) pair for the eager path). Called for every module output and
        gradient: kept short."""
        code = _AMP_DTYPE.get(t.dtype)
        if code is None or self.lib is None or not t.is_cuda or (
                self.used and t.get_device() != self._dev):
            self.order.append(~len(self.eager))
            with torch.no_grad():
                self.eager.append(eager_stats(t, *bounds))
            return
        if not t.is_contiguous():
            t = t.contiguous()
        dev = t.get_device()
        i = self.used
        if i < self.cap and self.buf is not None and self._dev == dev:
            self.used = i + 1
            self.order.append(i)
        else:
            i = self._slots(t.device, 1)
        rc = self._one(t.data_ptr(), t.numel(), code, self._base + i * _SLOT, TARGET_CODE[target],
                       _raw_stream_fast(dev))
        if rc:
            self._check(rc)

    def add_many(self, tensors, target, bounds):
        """add() of each of tensors, in one launch for those on the GPU."""
        dev = [t for t in tensors if self.lib is not None and t.is_cuda and t.dtype in _AMP_DTYPE]
        if len(dev) != len(tensors) or len({t.device for t in dev}) > 1 or (
                dev and self.used and dev[0].get_device() != self._dev):
            for t in tensors:
                self.add(t, target, bounds)
            return
        dev = [t if t.is_contiguous() else t.contiguous() for t in dev]
        n = len(dev)
        if not n:
            return
        first = self._slots(dev[0].device, n)
        slots = [self.buf_addr(first + i) for i in range(n)]
        u = ctypes.c_size_t * n
        self._check(self.lib.ampstats_many(
            n, u(*[t.data_ptr() for t in dev]), (ctypes.c_int64 * n)(*[t.numel() for t in dev]),
            (ctypes.c_int32 * n)(*[_AMP_DTYPE[t.dtype] for t in dev]), u(*slots),
            TARGET_CODE[target], _raw_stream_fast(dev[0].get_device())))

    def __len__(self):
        return len(self.order)

    def finish(self, extras=()):
        """Starts bringing the queued figures and the extras (float64 scalars) to the host: one
        copy into pinned memory, not waited for; the slots are emptied for the next step.
        Returns a Copy whose result() waits for it."""
        parts, dev = [], None
        if self.used:
            parts.append(self.buf[: self.used * _SLOT])
            dev = self.buf.device
        if self.eager:
            parts.append(torch.stack(self.eager).reshape(-1).view(torch.uint8))
        if extras:
            parts.append(torch.cat([e.reshape(1).double() for e in extras]).view(torch.uint8))
        host, event = None, None
        if parts:
            dev = dev or parts[0].device
            flat = torch.cat([p.to(dev) for p in parts]) if len(parts) > 1 else parts[0]
            if dev.type == "cuda":
                host = torch.empty(flat.numel(), dtype=torch.uint8, pin_memory=True)
                host.copy_(flat, non_blocking=True)
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(dev))
            else:
                host = flat.clone()
        copy = Copy(host, event, self.order, self.used, len(self.eager))
        if self.used:
            self._reset(0, self.used)  # after the copy, in stream order
        self.used, self.order, self.eager, self.retired = 0, [], [], []
        return copy

    def read(self, extras=()):
        """finish(extras).result(): the figures and the extras now."""
        return self.finish(extras).result()


class Copy:
    """A step's figures on their way to the host (StepStats.finish)."""

    def __init__(self, host, event, order, used, n_eager):
        self.host, self.event, self.order = host, event, order
        self.used, self.n_eager = used, n_eager
        self.slots, self.extras = None, []

    def wait(self):
        """Waits for the copy; then `slots` is a ctypes array of amp_stats in the order the
        figures were queued (kept alive by this object) and `extras` the extras as floats."""
        if self.slots is not None or self.host is None:
            return self
        if self.event is not None:
            self.event.synchronize()
        n, base = len(self.order), self.host.data_ptr()
        off = self.used * _SLOT
        ne = self.n_eager * 10
        self.extras = list(memoryview(ctypes.string_at(base + off + ne * 8,
                                                       self.host.numel() - off - ne * 8)).cast("d"))
        if not self.n_eager:  # the pinned copy is the array itself
            self.slots = (_Slot * n).from_address(base)
            return self
        dev = (_Slot * max(self.used, 1)).from_address(base)
        eager = memoryview(ctypes.string_at(base + off, ne * 8)).cast("d")
        self.slots = (_Slot * n)()
        for k, h in enumerate(self.order):
            if h >= 0:
                self.slots[k] = dev[h]
            else:
                e = eager[~h * 10: ~h * 10 + 10]
                self.slots[k] = _Slot(int(e[8]), e[0], e[1], 0.0, *[int(c) for c in e[2:8]],
                                      e[9])
        return self

    def result(self):
        """The figures (Figures, in the order they were queued) and the extras as floats."""
        self.wait()
        if self.slots is None:
            return [], []
        return [Figures(s.numel, s.min, s.max, s.n_nan, s.n_posinf, s.n_neginf, s.n_overflow,
                        s.n_underflow, s.n_zero, s.sumsq) for s in self.slots], self.extras
