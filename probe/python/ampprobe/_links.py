"""Which module's output goes into which module, recorded on the first sampled step's forward.
A broken step whose backward is traced per module (from its statistics, when it cannot be traced
op by op) is named by it: the first module output whose gradient went non-finite got that
gradient from the backward of what reads the output, which is the module it goes into when one
module takes it as an input, else the code around it."""

from ._judge import float_tensors


class Links:
    """The module outputs of one forward and the modules that take them as inputs, by layer id.
    parent(layer): the layer of the module it runs in, -1 for a model's root."""

    def __init__(self, parent):
        self.parent = parent
        self.open = True  # until the forward ends (close)
        self._outputs = {}  # (autograd node, output nr) of an output -> the layers that returned it
        self._readers = {}  # layer -> the layers that took its output as an input
        self._returned = set()  # layers whose output their parent returned as its own
        self._seen = set()

    def add(self, layer, args, out):
        """A module (layer) was called on args and returned out (a tensor)."""
        for a in float_tensors(args):
            if a.grad_fn is not None:
                for src in self._outputs.get((a.grad_fn, a.output_nr), ()):
                    self._readers.setdefault(src, set()).add(layer)
        if out.grad_fn is not None:
            self._outputs.setdefault((out.grad_fn, out.output_nr), []).append(layer)
        self._seen.add(layer)

    def close(self):
        """The forward has ended: the autograd nodes (the step's graph) are let go."""
        for layers in self._outputs.values():
            self._returned.update(l for l in layers if self.parent(l) in layers)
        self._outputs, self.open = {}, False

    def _within(self, layer, outer):
        while layer != -1:
            layer = self.parent(layer)
            if layer == outer:
                return True
        return False

    def reader(self, layer):
        """What reads layer's output, and so made a non-finite gradient of it from finite ones:
        ("module", M) when one module takes it as an input (modules within M left out), ("code",
        layer) when code does (no module, or several), ("loss", -1) for a model's output (the
        loss computation's), None when layer's output was not seen. Code that reads the output
        beside one module is not seen: that module is named."""
        if self.open or layer not in self._seen:
            return None
        while True:
            readers = self._readers.get(layer, ())
            outer = [r for r in readers if not any(self._within(r, o) for o in readers)]
            if len(outer) == 1:
                return "module", outer[0]
            if readers or layer not in self._returned:
                return ("code", layer) if self.parent(layer) != -1 or readers else ("loss", -1)
            layer = self.parent(layer)  # its output is the module's around it: what reads that
