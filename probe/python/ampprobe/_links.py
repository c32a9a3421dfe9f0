"""Which module's output goes into which module, recorded on the first sampled step's forward.
A broken step traced per module (from its statistics, when it cannot be traced op by op) is
named by it: the first module output whose gradient went non-finite got that gradient from the
backward of what reads the output, which is the module it goes into when one module takes it as
an input, else the code around it; and the first module output that went non-finite in the
forward was made in that module when all its inputs were finite outputs of other modules."""

from ._judge import float_tensors

# autograd nodes that hand their inputs on unchanged, which wrappers put between a module's output
# and the next module's input: looked through (FSDP2's post-backward hook on each module input)
PASS_THROUGH = {"RegisterPostBackwardFunctionBackward"}


class Links:
    """The module outputs of one forward and the modules that take them as inputs, by layer id.
    parent(layer): the layer of the module it runs in, -1 for a model's root."""

    def __init__(self, parent):
        self.parent = parent
        self.open = True  # until the forward ends (close)
        self._outputs = {}  # (autograd node, output nr) of an output -> layers that returned it
        self._readers = {}  # layer -> the layers that took its output as an input
        self._sources = {}  # layer -> the layers whose outputs were its inputs (None: not all)
        self._returned = set()  # layers whose output their parent returned as its own
        self._seen = set()

    def add(self, layer, args, out):
        """A module (layer) was called on args and returned out (a tensor)."""
        mine = set()  # what each input is the output of (None: data, a parameter, code's)
        for a in float_tensors(args):
            srcs = self._returned_by(a.grad_fn, a.output_nr)
            for src in srcs:
                self._readers.setdefault(src, set()).add(layer)
            mine.add(srcs[0] if srcs else None)
        earlier = self._sources.get(layer, set())  # (its earlier calls')
        whole = mine and None not in mine and earlier is not None
        self._sources[layer] = earlier | mine if whole else None
        if out.grad_fn is not None:
            self._outputs.setdefault((out.grad_fn, out.output_nr), []).append(layer)
        self._seen.add(layer)

    def _returned_by(self, node, nr):
        """The layers that returned output nr of autograd node node (looked through
        PASS_THROUGH nodes, whose output k is their input k)."""
        while node is not None:
            srcs = self._outputs.get((node, nr))
            if srcs is not None or type(node).__name__ not in PASS_THROUGH:
                return srcs or ()
            node, nr = node.next_functions[nr]
        return ()

    def close(self):
        """The forward has ended: the autograd nodes (the step's graph) are let go."""
        for layers in self._outputs.values():
            self._returned.update(l for l in layers if self.parent(l) in layers)
        self._outputs, self.open = {}, False

    def sources(self, layer):
        """The layers whose outputs were all of layer's inputs (each call's, when it was called
        more than once), or None: an input came from elsewhere (the data, a parameter, code), it
        had none, or its call was not seen."""
        return None if self.open else self._sources.get(layer)

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
