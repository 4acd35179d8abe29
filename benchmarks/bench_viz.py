"""asv benchmarks of tapegrad.viz: make_dot's DOT source for a 1,000-node backward graph
and the tape listing of the same graph. Skipped (NotImplementedError) when tapegrad has no
viz module or the graphviz Python package is missing. Nothing is rendered: dot is not timed.
"""
import os
import sys

try:
    import tapegrad as tg
except ImportError:                 # asv's "existing" environment: use this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tapegrad as tg

NODES = 1000


class MakeDot:
    """make_dot on a chain of NODES multiplications (NODES + 1 grad_fn boxes)."""
    timeout = 600

    def setup(self):
        if not hasattr(tg, "viz"):
            raise NotImplementedError("tapegrad has no viz module")
        try:
            import graphviz  # noqa: F401
        except ImportError as err:
            raise NotImplementedError("the graphviz Python package is missing") from err
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        y = x
        for _ in range(NODES):
            y = y * 1.0001
        self.x, self.y = x, y
        tg.viz.make_dot(self.y)     # warm: node classes made

    def time_make_dot_1000_nodes(self):
        """DOT source of a 1,000-node graph (building the Digraph and its source)."""
        tg.viz.make_dot(self.y).source

    def time_make_dot_1000_nodes_saved(self):
        """The same with show_saved=True (each node's saved values read off its row)."""
        tg.viz.make_dot(self.y, show_saved=True).source

    def time_tape_listing_1000_rows(self):
        """tapegrad.viz.tape(y): the listing of the live rows, the backward's marked."""
        tg.viz.tape(self.y)
