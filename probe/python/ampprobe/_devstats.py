"""_devstats.py — a step's tensor statistics on the GPU, read back with one copy (needs torch).

libampcore's fused statistics kernel (libampcore/src/cuda/cuda-stats.cu), built for the bridge as
libampstats_cuda.so (probe/python/ampstats.cu), runs on a tensor's memory on PyTorch's current
stream, the tensors queued since the last launch (defer()) in one, adding each tensor's figures
(min, max, NaN, +inf, -inf, overflow, underflow and zero counts, sum of squares) into a slot of a
device buffer owned here. Nothing waits: finish() gathers a few scalars of the step beside the
slots (put() does that on its own), writes the used part of the buffer into mapped pinned host
memory and empties the slots for the next step, in one launch that raises a flag in that memory
last; its result() waits for the flag, by then (a step later) long raised, and release() hands
the host buffer back for a later step. mark() and marked() bring a few scalars (what tells
whether a step broke) to the host as soon as they are computed, waiting for nothing else.

The slots are amp_stats (libampcore/include/amp.h, mirrored in _records.py); the module reports
its size and a module that disagrees is not used. Tensors not on a GPU, and every tensor when the
module cannot be loaded, go through eager torch reductions instead (several kernels per tensor).
"""
import ctypes
import os
from array import array

import torch

from . import _records

MODULE = "libampstats_cuda.so"
_INF = float("inf")

# amp_dtype codes
_AMP_DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3,
              torch.int64: 4}
TARGET_CODE = {"f32": 0, "f16": 1, "bf16": 2}


_SCALAR_CODE = {**_AMP_DTYPE, torch.float64: 5}  # ampstats_gather's codes
HEAD = 16  # float64 scalars ahead of a step's slots (StepStats.put)
_HEAD_BYTES = HEAD * 8
# deferred tensors (defer()) go in one launch once this many are waiting (what one launch of the
# kernel carries), or this many bytes of tensors that nothing but the wait keeps alive (gradients;
# a module output is checked instead and alive until the forward ends anyway, its backward
# saves it)
BATCH = 48
BATCH_BYTES = 256 << 20

_Slot = _records.AmpStats
_SLOT = ctypes.sizeof(_Slot)
# mapped host memory (ampstats_host_alloc): the flag (a uint64 the kernel writing the memory sets
# last), then from _DATA on what it writes (a cache line further)
_DATA = 64


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
    # arrays by address (array.array); streams as integers, each call's GPU last
    lib.ampstats_many.argtypes = [i, u, u, u, u, u, i, u, i]
    lib.ampstats_many.restype = i
    lib.ampstats_reset.argtypes = [u, i64, u, i]
    lib.ampstats_reset.restype = i
    lib.ampstats_gather.argtypes = [i, u, u, u, u, i]
    lib.ampstats_gather.restype = i
    u64 = ctypes.c_uint64
    lib.ampstats_mark.argtypes = [i, u, u, u, u, u64, u, i]
    lib.ampstats_mark.restype = i
    lib.ampstats_finish.argtypes = [i, u, u, u, i64, u, u, u64, u, i]
    lib.ampstats_finish.restype = i
    lib.ampstats_poll.argtypes = [u, u64, u, i]
    lib.ampstats_poll.restype = i
    lib.ampstats_host_alloc.argtypes = [u, ctypes.POINTER(u)]
    lib.ampstats_host_alloc.restype = u
    lib.ampstats_host_free.argtypes = [u]
    lib.ampstats_host_free.restype = i
    lib.ampstats_error.argtypes = [i]
    lib.ampstats_error.restype = ctypes.c_char_p
    return lib, None


def _raw_stream(device_index):
    """The current stream of a GPU as an integer handle."""
    return torch.cuda.current_stream(device_index).cuda_stream


_raw_stream_fast = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_stream


def _scalar_args(tensors, dev):
    """The addresses and gather codes of one-element tensors (array.array), or None when one
    is not on GPU dev or of a dtype the gather kernel reads."""
    codes = array("i")
    for t in tensors:
        c = _SCALAR_CODE.get(t.dtype)
        if c is None or t.get_device() != dev or not t.is_cuda:
            return None
        codes.append(c)
    return array("Q", [t.data_ptr() for t in tensors]), codes


def _addr(a):
    return a.buffer_info()[0]


def _quiet():
    """A block of the bridge's own torch calls, hidden from every TorchFunctionMode (the op
    step's recorder, the loss tape): they are not the program's ops. For the paths that compute
    with torch (no statistics module, tensors off the GPU), not the GPU path's C calls."""
    return torch._C.DisableTorchFunction()


def eager_stats(x, fmax, tiny):
    """The same ten figures as one float64 tensor on x's device, by eager torch reductions: min,
    max (+inf/-inf when none is finite), NaN, +inf, -inf, overflow, underflow, zero counts, numel,
    sum of squares. For tensors off the GPU, and when the module is missing."""
    with _quiet():
        return _eager_stats(x, fmax, tiny)


def _eager_stats(x, fmax, tiny):
    v = x.detach().reshape(-1).float()
    if not v.numel():  # no value: no finite one either
        return torch.tensor([_INF, -_INF] + [0.0] * 8, dtype=torch.float64, device=v.device)
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
    """The statistics queued during one step, on one GPU: add()/defer()/add_many() queue them,
    put() places a few scalars beside them (the loss, the loss scale), finish() starts their
    copy to the host and empties the slots for the next step; its Copy gives them back as
    Figures in the order they were queued. A tensor on another device than the step's first
    one, or off the GPU, goes the eager way.

    The device buffer holds HEAD float64 scalars, then the slots; its host copies go into mapped
    pinned buffers that come back to a pool when a Copy is released, so a step costs one
    statistics kernel per batch of tensors, one gather kernel per put() and one finishing kernel
    (a mark() one more).

    Queuing a tensor is kept to a few list appends (it runs for every module output and
    gradient, on the host's critical path): its slot, its device and its memory are looked at
    when its batch launches (flush())."""

    def __init__(self, lib, capacity=256):
        self.lib = lib
        self.cap = capacity
        self.buf = None  # uint8 tensor: HEAD scalars and cap slots (allocated at first use)
        self.scal = None  # the scalars, a float64 view of buf
        self._base, self._dev = 0, -1  # the first slot's address, buf's device index
        self.used = 0
        self.placed = False  # put() was called this step (buf cannot move)
        self.retired = []  # buffers outgrown this step: kept until read() (queued kernels)
        self.eager = []  # figures tensors of the eager path
        self.order = []  # per handle: slot index (>= 0) or ~eager index (None: not launched)
        self.pending = []  # deferred tensors (held until flush()): (tensor, its handle, its
        # amp_dtype code (None: eager), its numel)
        self._pending_bytes = 0  # of the unchecked ones
        self._pending_target, self._pending_bounds = None, None
        self._pending_checks = []  # (index in pending, handle, version) of checked ones
        self.modified = []  # handles of checked deferred tensors written to before their read
        self._twins = []  # (slot, slot it repeats): a tensor read once for both (flush())
        self._pool = []  # free mapped host buffers: (host address, device address, bytes)
        self._seq = 0  # the last flag value given to a kernel (each call its own)
        self._marked, self._mark_n = None, -1  # mark()'s tensors and how many the kernel took
        self._mark_buf = None  # mark()'s mapped buffer (as in _pool)
        self._mark_wait = (0, 0, -1)  # the flag value, stream and GPU marked() waits for
        self.closed = False  # close() gave everything back

    def _alloc(self, device, cap):
        """A fresh buffer of cap slots on device, slots emptied (kernels queued on it so far
        keep the old one alive through retired)."""
        buf = torch.empty(_HEAD_BYTES + cap * _SLOT, dtype=torch.uint8, device=device)
        if self.buf is not None and self.buf.device == buf.device:
            buf[: self.buf.numel()].copy_(self.buf)
            self.retired.append(self.buf)
        self.buf, self.cap = buf, cap
        self.scal = buf[:_HEAD_BYTES].view(torch.float64)
        self._base = buf.data_ptr() + _HEAD_BYTES
        self._dev = buf.get_device()
        if self.lib is not None and device.type == "cuda":
            self._reset(self.used, cap - self.used)

    def _slots(self, device, n):
        """The index of the first of n fresh slots on device (the buffer grows as needed: slot
        addresses are only valid until the next call). Moves to device only when nothing is in
        use (flush() sees to that)."""
        if self.buf is None or self.buf.device != device:
            self.used = 0
            cap = self.cap
            while cap < n:
                cap *= 2
            self.buf = None
            self._alloc(device, cap)
        elif self.used + n > self.cap:
            cap = self.cap
            while self.used + n > cap:
                cap *= 2
            self._alloc(device, cap)
        first = self.used
        self.used += n
        return first

    def _reset(self, first, n):
        self._check(self.lib.ampstats_reset(self._base + first * _SLOT, n,
                                            _raw_stream_fast(self._dev), self._dev))

    def _check(self, rc):
        if rc:
            raise RuntimeError("ampprobe: statistics kernel: " +
                               self.lib.ampstats_error(rc).decode())

    def defer(self, t, target, bounds, check=False, dtype=None, numel=None):
        """Queues t's statistics relative to target ('f16', 'bf16', 'f32'; bounds its
        (overflow, tiny) pair for the eager path) and returns its handle (its place among the
        step's figures). Its kernel waits for others' and runs with them in one launch
        (flush(): when BATCH tensors or BATCH_BYTES of unchecked ones wait, and before
        finish()); t is held until then. check: t may be written to before that (a module
        output): flush() compares its version counter and lists the handle in `modified` when
        it moved (its figures are then of the new values). dtype, numel: t's, when the caller
        has them. Called for every module output and gradient: kept short."""
        if target != self._pending_target:
            self.flush()
            self._pending_target, self._pending_bounds = target, bounds
        if dtype is None:
            dtype, numel = t.dtype, t.numel()
        handle = len(self.order)
        self.order.append(None)
        pending = self.pending
        if check:
            self._pending_checks.append((len(pending), handle, t._version))
        else:
            self._pending_bytes += numel * dtype.itemsize
        pending.append((t, handle, _AMP_DTYPE.get(dtype), numel))
        if len(pending) >= BATCH or self._pending_bytes >= BATCH_BYTES:
            self.flush()
        return handle

    def add(self, t, target, bounds, defer=False, check=False):
        """Queues t's statistics (see defer()) and returns its handle; launched at once unless
        defer."""
        handle = self.defer(t, target, bounds, check)
        if not defer:
            self.flush()
        return handle

    def add_many(self, tensors, target, bounds, defer=False):
        """add() of each of tensors (not written to before they are read: parameters, their
        gradients), in one launch with the deferred ones (defer: with those deferred after them
        too, at the next flush(); the tensors must keep their memory until then)."""
        if target != self._pending_target:
            self.flush()
            self._pending_target, self._pending_bounds = target, bounds
        first = len(self.order)
        self.order += [None] * len(tensors)
        code_of = _AMP_DTYPE.get
        self.pending += [(t, first + k, code_of(t.dtype), t.numel())
                         for k, t in enumerate(tensors)]
        if not defer:
            self.flush()

    def flush(self):
        """Launches the deferred tensors' statistics (as few launches as the kernel's
        parameters allow) on the current stream; those off the step's GPU go the eager way."""
        if not self.pending:
            return
        ts, handles, tcodes, tnumels = zip(*self.pending)
        checks = self._pending_checks
        self.pending, self._pending_bytes = [], 0
        if checks:
            self._pending_checks = []
            self.modified += [h for k, h, v in checks if ts[k]._version != v]
        # the step's GPU: the buffer's once anything is in it, else the first tensor's
        dev = self._dev if self.buf is not None and (self.used or self.placed) else None
        lib = self.lib
        devs = [t.get_device() for t in ts]
        if dev is None and devs[0] >= 0 and ts[0].is_cuda:
            dev = devs[0]
        ptrs = None
        if (lib is not None and dev is not None and devs.count(dev) == len(ts)
                and None not in tcodes and False not in [t.is_contiguous() for t in ts]):
            # the common case, a C loop each: dense tensors of the step's GPU that the kernel reads
            ptrs, numels, codes, slots = [t.data_ptr() for t in ts], tnumels, tcodes, handles
        if ptrs is None or 0 in ptrs:  # (0: a tensor subclass whose memory is not its values)
            ptrs, numels, codes, slots, copies = [], [], [], [], []
            for t, d, h, code, numel in zip(ts, devs, handles, tcodes, tnumels):
                if code is not None and lib is not None:
                    if dev is None and d >= 0 and t.is_cuda:
                        dev = d
                    if d == dev:
                        if not t.is_contiguous():
                            t = t.contiguous()  # a copy of our own, alive until the launch
                            copies.append(t)
                        ptr = t.data_ptr()
                        if ptr:
                            ptrs.append(ptr)
                            numels.append(numel)
                            codes.append(code)
                            slots.append(h)
                            continue
                self.order[h] = ~len(self.eager)
                with torch.no_grad():
                    self.eager.append(eager_stats(t, *self._pending_bounds))
        n = len(ptrs)
        if not n:
            return
        first = self._slots(self.buf.device if self.buf is not None and self._dev == dev
                            else torch.device("cuda", dev), n)
        if slots[-1] - slots[0] == n - 1:  # consecutive handles (as they nearly always are)
            self.order[slots[0]:slots[0] + n] = range(first, first + n)
        else:
            order = self.order
            for k, h in enumerate(slots):
                order[h] = first + k
        at = None  # each tensor into its own slot, in order
        if len(set(ptrs)) < n:  # a tensor queued twice in one batch (a module that returns its
            # child's output, or a view of it): the same memory, read once; its twin's figures
            # are copied on the host (_twins)
            seen, keep = {}, []
            for k, key in enumerate(zip(ptrs, numels, codes)):
                j = seen.setdefault(key, k)
                if j == k:
                    keep.append(k)
                else:
                    self._twins.append((first + k, first + j))
            ptrs, numels, codes = [[x[k] for k in keep] for x in (ptrs, numels, codes)]
            at = array("i", keep)
        ptrs, numels, codes = array("Q", ptrs), array("q", numels), array("i", codes)
        self._check(lib.ampstats_many(
            len(ptrs), _addr(ptrs), _addr(numels), _addr(codes), _addr(at) if at else 0,
            self._base + first * _SLOT, TARGET_CODE[self._pending_target],
            _raw_stream_fast(self._dev), self._dev))

    def nonfinite_count(self, handles):
        """A one-element int64 tensor on the step's GPU that will hold how many NaN and +-inf
        values the tensors of handles (launched, in consecutive slots: add_many's) have, in
        stream order after their kernel; None when they did not go that way."""
        slots = [self.order[h] for h in handles]
        if not slots or slots[0] is None or slots[0] < 0 or \
                slots != list(range(slots[0], slots[0] + len(slots))):
            return None
        at = _HEAD_BYTES + slots[0] * _SLOT
        rows = self.buf[at:at + len(slots) * _SLOT].view(torch.int64).view(len(slots), -1)
        first = _Slot.n_nan.offset // 8  # n_nan, n_posinf, n_neginf: three int64 in a row
        return rows[:, first:first + 3].sum()

    def put(self, at, tensors):
        """Places one-element tensors (the loss, the scale, ...) as float64 at scalars at, at+1,
        ... (at + len(tensors) <= HEAD), in stream order: their values as they are now, not
        after later kernels. finish() copies them with the statistics."""
        if not tensors:
            return
        if at < 0 or at + len(tensors) > HEAD:
            raise ValueError("StepStats.put: scalars %d..%d beyond the %d places" % (
                at, at + len(tensors) - 1, HEAD))
        if self.buf is None or (not self.used and not self.placed
                                and self.buf.device != tensors[0].device):
            self.buf = None
            self.used = 0
            self._alloc(tensors[0].device, self.cap)
        self.placed = True
        args = _scalar_args(tensors, self._dev) if self.lib is not None and self._dev >= 0 \
            else None
        if args is not None:
            self._check(self.lib.ampstats_gather(
                len(tensors), _addr(args[0]), _addr(args[1]), self.scal.data_ptr() + at * 8,
                _raw_stream_fast(self._dev), self._dev))
            return
        with _quiet():  # another device, dtype or no module: torch's copies
            for k, t in enumerate(tensors):
                self.scal[at + k].copy_(t.detach().reshape(()))

    def mark(self, tensors):
        """Marks the values of one-element tensors (the step's loss and found_inf) as they are
        now, in stream order: one small kernel writes them as float64 straight into mapped host
        memory and an event is recorded behind it, so that marked() waits for them only, not for
        the rest of the step; no other stream is involved. Tensors that cannot go that way (off
        the GPU, another dtype, no module) are kept and read by marked() with torch."""
        self._marked, self._mark_n = list(tensors), -1  # alive until marked()
        dev = tensors[0].get_device() if tensors else -1
        args = _scalar_args(tensors, dev) if (self.lib is not None and dev >= 0
                                              and len(tensors) <= HEAD) else None
        if args is None:  # copies, in stream order: the values as they are now (the scaler's
            with _quiet():  # update() changes its scale in place before marked() reads it)
                self._marked = [t.detach().reshape(()).clone() for t in tensors]
            return
        if self._mark_buf is None:
            self._mark_buf = self._mapped(_DATA + HEAD * 8)
        _, at, _ = self._mark_buf
        self._seq += 1
        stream = _raw_stream_fast(dev)
        self._check(self.lib.ampstats_mark(len(tensors), _addr(args[0]), _addr(args[1]),
                                           at + _DATA, at, self._seq, stream, dev))
        self._mark_n, self._mark_wait = len(tensors), (self._seq, stream, dev)

    def marked_count(self):
        """How many tensors the last mark() marked that marked() has not read (-1: none)."""
        return -1 if self._marked is None else len(self._marked)

    def marked(self):
        """The values the last mark() marked, as floats (waits for those only), or None when
        nothing was marked since the last call."""
        ts, self._marked = self._marked, None
        if ts is None:
            return None
        if self._mark_n < 0:
            with _quiet():
                return torch.stack([t.double().cpu() for t in ts]).tolist() if ts else []
        host = self._mark_buf[0]
        self._check(self.lib.ampstats_poll(host, *self._mark_wait))
        return list((ctypes.c_double * self._mark_n).from_address(host + _DATA))

    def _mapped(self, nbytes):
        """A free mapped host buffer of at least nbytes (from the pool, else new)."""
        while self._pool:
            buf = self._pool.pop()
            if buf[2] >= nbytes:
                return buf
            self._check(self.lib.ampstats_host_free(buf[0]))  # outgrown
        size = max(nbytes, _DATA + _HEAD_BYTES + self.cap * _SLOT)
        dev = ctypes.c_size_t(0)
        host = self.lib.ampstats_host_alloc(size, ctypes.byref(dev))
        if not host:
            raise RuntimeError("ampprobe: cannot allocate %d bytes of mapped host memory for "
                               "the step's statistics" % size)
        return host, dev.value, size

    def close(self):
        """Gives back the mapped memory (the watcher is done; a Copy released later frees its
        own)."""
        if self._marked is not None:  # the mark kernel may still write into the mapped memory
            self.marked()
        bufs, self._pool = self._pool + ([self._mark_buf] if self._mark_buf else []), []
        self._mark_buf = None
        for host, _, _ in bufs:
            self._check(self.lib.ampstats_host_free(host))
        self.closed = True

    def finish(self, n_scalars=0, scalars=None):
        """Starts bringing the queued figures and the first n_scalars scalars (put()) to the
        host, not waited for; the slots are emptied for the next step. scalars: one-element
        tensors placed first (put(0, scalars); n_scalars is then their number). Returns a Copy
        whose result() waits for it. The common case is one launch (ampstats_finish): the
        statistics module, the step's tensors all read by it, on a GPU; else torch copies into
        pinned memory behind a torch event. A step with nothing queued, placed or given (a
        step without statistics) launches nothing."""
        if not (scalars or n_scalars or self.pending or self.used or self.placed or self.eager
                or self.order):
            return self._finished(Copy(self, None, None, None, [], 0, 0))
        self.flush()
        args = None
        if scalars:
            n_scalars = len(scalars)
            if (self.lib is not None and self.buf is not None and self._dev >= 0
                    and not self.eager and n_scalars <= HEAD):
                args = _scalar_args(scalars, self._dev)
            if args is None:
                self.put(0, scalars)
        host, event, nbytes = None, None, 0
        if self.buf is not None and (self.used or self.placed or args):
            nbytes = _HEAD_BYTES + self.used * _SLOT
            if self.buf.is_cuda and self.lib is not None and not self.eager:
                mapped = self._mapped(_DATA + nbytes)
                self._seq += 1
                stream = _raw_stream_fast(self._dev)
                self._check(self.lib.ampstats_finish(
                    n_scalars if args else 0, _addr(args[0]) if args else 0,
                    _addr(args[1]) if args else 0, self.buf.data_ptr(), self.used,
                    mapped[1] + _DATA, mapped[1], self._seq, stream, self._dev))
                return self._finished(Copy(self, None, None, None, self.order, self.used,
                                           n_scalars, (mapped, self._seq, stream), self._twins))
        with _quiet():
            return self._finish_with_torch(host, event, nbytes, n_scalars)

    def _finish_with_torch(self, host, event, nbytes, n_scalars):
        """finish() with torch's copies (the eager figures, or no statistics module)."""
        eager = None
        if nbytes:
            if self.buf.is_cuda:
                host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                host.copy_(self.buf[:nbytes], non_blocking=True)
                event = torch.cuda.Event()
            else:
                host = self.buf[:nbytes].clone()
        if self.eager:
            dev = self.buf.device if self.buf is not None else self.eager[0].device
            flat = torch.stack([e.to(dev) for e in self.eager]).reshape(-1)
            if flat.is_cuda:
                eager = torch.empty(flat.numel(), dtype=torch.float64, pin_memory=True)
                eager.copy_(flat, non_blocking=True)
                if event is None:  # (one behind both copies)
                    event = torch.cuda.Event()
            else:
                eager = flat.clone()
        if event is not None:
            event.record(torch.cuda.current_stream(self.buf.device if self.buf is not None
                                                   else self.eager[0].device))
        copy = Copy(self, host, event, eager, self.order, self.used, n_scalars if nbytes else 0,
                    twins=self._twins)
        if self.used and self.lib is not None and self.buf.is_cuda:
            self._reset(0, self.used)  # after the copy, in stream order
        return self._finished(copy)

    def _finished(self, copy):
        """The step's state emptied for the next one; returns copy."""
        self.used, self.placed, self.order, self.eager, self.retired = 0, False, [], [], []
        self._twins = []
        return copy

    def read(self, n_scalars=0):
        """finish(n_scalars).result(): the figures and the scalars now."""
        return self.finish(n_scalars).result()


class Copy:
    """A step's figures on their way to the host (StepStats.finish): in a mapped buffer of the
    statistics module's that a kernel writes (mapped: (buffer, flag value, stream)), or in a
    pinned tensor (host) and eager figures that torch copies behind event."""

    def __init__(self, stats, host, event, eager, order, used, n_scalars, mapped=None,
                 twins=()):
        self.stats, self.host, self.event, self.eager = stats, host, event, eager
        self.order, self.used, self.n_scalars = order, used, n_scalars
        self.mapped = mapped
        self.twins = twins  # (slot, slot it repeats), filled in by wait()
        self.dev = stats._dev
        self.slots, self.extras = None, []

    def wait(self):
        """Waits for the copy; then `slots` is a ctypes array of amp_stats in the order the
        figures were queued and `extras` the scalars as floats. The slots are the host buffer
        itself until release()."""
        if self.slots is not None or (self.host is None and self.eager is None and
                                      self.mapped is None):
            return self
        if self.mapped is not None:
            (host, _, _), seq, stream = self.mapped
            self.stats._check(self.stats.lib.ampstats_poll(host, seq, stream, self.dev))
            at = host + _DATA
        else:
            if self.event is not None:
                self.event.synchronize()
            at = self.host.data_ptr() if self.host is not None else 0
        n = len(self.order)
        base = at + _HEAD_BYTES if at else 0
        if at and self.n_scalars:
            self.extras = list((ctypes.c_double * self.n_scalars).from_address(at))
        dev = (_Slot * self.used).from_address(base) if self.used else None
        for slot, twin in self.twins:
            dev[slot] = dev[twin]
        if self.eager is None:  # the host buffer is the array itself
            self.slots = (_Slot * n).from_address(base)
            return self
        eager = self.eager.tolist()
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
        """The figures (Figures, in the order they were queued) and the scalars as floats."""
        self.wait()
        if self.slots is None:
            return [], self.extras
        return [Figures(s.numel, s.min, s.max, s.n_nan, s.n_posinf, s.n_neginf, s.n_overflow,
                        s.n_underflow, s.n_zero, s.sumsq) for s in self.slots], self.extras

    def release(self):
        """Gives the host buffer back for a later step: slots and result() are gone."""
        if self.mapped is not None:
            self.wait()
            buf = self.mapped[0]
            if self.stats.closed:
                self.stats._check(self.stats.lib.ampstats_host_free(buf[0]))
            else:
                self.stats._pool.append(buf)
            self.mapped = None
        self.host = self.eager = None
        self.slots = None
