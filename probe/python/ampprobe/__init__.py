"""ampprobe — the Python side of ampprobe (see the repository's README.md).

  ampprobe.torch   watch(model, scaler=..., optimizer=...): records a PyTorch training run as
                   libampcore's instrumentation would (needs torch); `ampprobe run --torch`
                   attaches it with no code change.
  ampprobe._records  libampcore's record API through ctypes (no torch).
  ampprobe._devstats a step's tensor statistics on the GPU (libampstats_cuda.so), one copy back.
  ampprobe._vocab    layer names, op names and event texts shared with libampcore (no torch).
"""
__version__ = "0.1.0"
