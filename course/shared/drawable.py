"""Why a figure cannot be drawn, in a sentence about the figure rather than matplotlib's traceback.

A figure is built by calls that all succeed (``ax.set_title(r"$\\textbf{x}$")`` stores the text)
and fails only when it is drawn: saved, shown, or measured. The usual cause is a text read as
mathematics: matplotlib parses whatever sits between two ``$`` with its own small TeX (mathtext),
which knows ``\\mathbf`` and ``\\ell`` but not ``\\textbf`` or ``\\lVert``. :func:`why_not_drawn`
finds the text that stops the drawing and says where it is (the title of panel 1, an x tick
label) and how to write it; the tests (``tests/support.draw_headless``) and ``grader.py
figures`` both report a figure that cannot be drawn with it.
"""

from __future__ import annotations


def _math_error(text: str) -> str | None:
    """mathtext's complaint about ``text`` (its last line), or None when it parses or has no math."""
    from matplotlib import cbook
    from matplotlib.mathtext import MathTextParser

    if not cbook.is_math_text(text):
        return None
    try:
        MathTextParser("path").parse(text)
    except Exception as error:  # noqa: BLE001 - a ValueError, or a RecursionError for deep {{{
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return lines[-1][:200] if lines else type(error).__name__
    return None


def _texts_with_places(fig):
    """``(place, Text)`` for every text of ``fig``, ``place`` in words: "the title of panel 1"."""
    for n, ax in enumerate(fig.axes, start=1):
        panel = f"panel {n}"
        yield f"the title of {panel}", ax.title
        for side in ("_left_title", "_right_title"):
            title = getattr(ax, side, None)
            if title is not None:
                yield f"a title of {panel}", title
        yield f"the x label of {panel}", ax.xaxis.label
        yield f"the y label of {panel}", ax.yaxis.label
        for label in ax.get_xticklabels():
            yield f"an x tick label of {panel}", label
        for label in ax.get_yticklabels():
            yield f"a y tick label of {panel}", label
        legend = ax.get_legend()
        if legend is not None:
            yield f"the legend of {panel}", legend.get_title()
            for text in legend.get_texts():
                yield f"the legend of {panel}", text
        for text in ax.texts:
            yield f"a text in {panel}", text
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        yield "the figure's title", suptitle
    for text in fig.texts:
        yield "a text of the figure", text


def why_not_drawn(fig, error: BaseException, whose: str = "your figure") -> str:
    """A sentence saying why ``fig`` could not be drawn, given the ``error`` drawing raised."""
    for place, text in _texts_with_places(fig):
        content = text.get_text()
        if not content or text.get_usetex():
            continue
        complaint = _math_error(content)
        if complaint:
            shown = content if len(content) <= 80 else content[:77] + "..."
            return (f"{whose} cannot be drawn: {place}, {shown!r}, has text between two '$', "
                    f"which matplotlib reads as mathematics and cannot parse ({complaint}). "
                    "Use only what matplotlib's mathtext knows (\\mathbf, \\mathrm, \\ell, "
                    "\\Vert, ...), or write a plain dollar sign as \\$")
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return (f"{whose} cannot be drawn: matplotlib stops with {type(error).__name__}"
            f"{': ' + first if first else ''}. Build it again step by step and draw it "
            "(fig.savefig) after each step to find the call that breaks it")
