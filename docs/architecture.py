"""Draws ``docs/architecture.png``: accel's layers and the IR each one speaks.

Run ``python docs/architecture.py`` after changing the pipeline (needs matplotlib).
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

#: (layer, folder, what it does) from the user's function down to the machine.
LAYERS = [
    ("frontend", "accel/frontend.py, language.py",
     "traces Python functions over Acc / Exp proxies; recovers sharing"),
    ("AST", "accel/ast/",
     "typed two-level AST (array combinators over scalar expressions); typecheck, pretty"),
    ("differentiate", "accel/ad/",
     "reverse mode (thesis: primal + dual passes), forward mode, finite differences"),
    ("simplify", "accel/simplify/",
     "inlining, constant folding, CSE, DCE, tuple splitting; run to a fixpoint"),
    ("fuse", "accel/fusion/",
     "delayed arrays -> kernel program: materialisation steps + control flow"),
    ("backends", "backends/ (accel.backends)",
     "interpreter (oracle), fused (NumPy); numba/ (shared emitter, host) -> cpu/, cuda/"),
]

#: The IR on each arrow between consecutive layers.
IRS = ["AST (Acc programs)", "AST, type-checked", "AST (a derivative is a program)",
       "AST, simplified", "kernel program"]


def draw(path: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 8))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, len(LAYERS) * 1.6)
    ax.axis("off")
    top = len(LAYERS) * 1.6 - 1.1
    for i, (name, folder, what) in enumerate(LAYERS):
        y = top - i * 1.6
        ax.add_patch(FancyBboxPatch((0.4, y), 9.2, 0.9, boxstyle="round,pad=0.05",
                                    fc="#e8eef7" if i % 2 else "#f4f1e6", ec="#333"))
        ax.text(0.6, y + 0.6, name, fontsize=12, weight="bold", va="center")
        ax.text(3.0, y + 0.6, folder, fontsize=10, family="monospace", va="center")
        ax.text(0.6, y + 0.22, what, fontsize=9, va="center", color="#333")
        if i < len(IRS):
            ax.add_patch(FancyArrowPatch((5, y - 0.02), (5, y - 0.68), arrowstyle="-|>",
                                         mutation_scale=14, color="#555"))
            ax.text(5.2, y - 0.36, IRS[i], fontsize=9, style="italic", va="center")
    ax.set_title("accel: layers and the IR between them (each arrow a pure function)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    draw(os.path.join(os.path.dirname(os.path.abspath(__file__)), "architecture.png"))
