"""A matplotlib figure as plain data, and the same figure drawn again from it.

A learner's plotting function runs in the grader's sandbox; its figure crosses the boundary as
:func:`describe`'s plain data (its axes and what is drawn in them, a colour bar's own axes by its
link alone) and the trusted side draws a real ``Figure`` from it with :func:`rebuild`. The tests
then read the rebuilt figure exactly as they read the learner's own in one process: what is
drawn, whatever the plotting call.
"""

from __future__ import annotations

import numpy as np

_NORMS = ("Normalize", "TwoSlopeNorm", "CenteredNorm", "LogNorm", "SymLogNorm", "PowerNorm")
MAX_MESH_CELLS = 2**20  # cells of one rebuilt mesh: far more than any heatmap of the kata
#: Pixels of one rebuilt figure (64 MiB of RGBA), twenty times the kata's largest. Drawing makes
#: a buffer of width x height pixels: a figure asked for as 600 x 600 inches would cost the
#: trusted side 14 GB. A larger one is drawn at a lower dpi, which changes no size in inches or
#: points, so nothing a test reads; one that would need less than MIN_DPI is refused.
MAX_PIXELS = 2**24
#: Pixels of one side of a rebuilt figure, so drawn.
MAX_SIDE = 2**15
#: The lowest dpi a figure is drawn at to fit (below it a 6-point text has no pixel).
MIN_DPI = 20


def _floats(values) -> np.ndarray:
    try:
        return np.ma.filled(np.ma.asarray(values, dtype=np.float64), np.nan)
    except (TypeError, ValueError):
        return np.zeros(0)


def _color(value) -> str | None:
    from matplotlib.colors import to_hex

    try:
        return to_hex(value, keep_alpha=True)
    except (TypeError, ValueError):
        return None


def _tick_labels(labels) -> list:
    return [[t.get_text(), float(t.get_rotation()), float(t.get_fontsize())] for t in labels]


def _line(ax, line) -> dict:
    x, y = _floats(line.get_xdata()).ravel(), _floats(line.get_ydata()).ravel()
    if line.get_transform() is ax.transData:
        axline = None
    elif len(x) == 2 and tuple(x) == (0.0, 1.0):  # axhline: x spans the axes
        axline = "h"
    elif len(y) == 2 and tuple(y) == (0.0, 1.0):
        axline = "v"
    else:
        axline = "axes"
    return {"x": x, "y": y, "axline": axline, "color": _color(line.get_color()),
            "ls": str(line.get_linestyle()), "lw": float(line.get_linewidth()),
            "marker": str(line.get_marker()), "ms": float(line.get_markersize()),
            "label": str(line.get_label()), "alpha": line.get_alpha()}


def _collection(collection) -> dict | None:
    from matplotlib.collections import LineCollection, PathCollection

    if not isinstance(collection, (PathCollection, LineCollection)):
        return None  # meshes are described apart (_mesh), fills say nothing the tests read
    base = {"label": str(collection.get_label()), "alpha": collection.get_alpha()}
    array = collection.get_array()
    if array is not None:
        base["array"] = _floats(array)
    if isinstance(collection, PathCollection):
        return {**base, "kind": "path",
                "offsets": _floats(collection.get_offsets()).reshape(-1, 2),
                "sizes": _floats(collection.get_sizes()),
                "colors": [_color(c) for c in collection.get_facecolors()][:10_000]}
    return {**base, "kind": "lines",
            "segments": [_floats(s).reshape(-1, 2) for s in collection.get_segments()][:5_000],
            "colors": [_color(c) for c in collection.get_colors()][:5_000],
            "linewidths": _floats(collection.get_linewidths()),
            "linestyles": [[float(offset or 0.0),
                            None if dashes is None else [float(d) for d in dashes]]
                           for offset, dashes in collection.get_linestyles()][:5_000]}


def _colours(fig, mappable) -> dict:
    """How an image or a mesh turns values into colours: colormap, limits, norm, colour bar
    (the index of its axes in ``fig.axes``)."""
    norm = mappable.norm
    colorbar = getattr(mappable, "colorbar", None)
    return {"cmap": mappable.get_cmap().name,
            "clim": [float(v) if v is not None else None for v in mappable.get_clim()],
            "norm": type(norm).__name__ if type(norm).__name__ in _NORMS else "Normalize",
            "vcenter": float(norm.vcenter) if getattr(norm, "vcenter", None) is not None else None,
            "colorbar": fig.axes.index(colorbar.ax) if colorbar is not None
            and colorbar.ax in fig.axes else None}


def _image(fig, image) -> dict:
    return {"array": _floats(image.get_array()), "extent": [float(v) for v in image.get_extent()],
            "origin": image.origin, "interpolation": str(image.get_interpolation()),
            **_colours(fig, image)}


def mesh_array(mesh):
    """A mesh's values, every cell of them: ``(rows, cols)`` as given (or flattened, row by row).

    matplotlib before 3.10 gives ``pcolor``'s masked cells (NaN included) no place in
    ``PolyQuadMesh.get_array()``; the base class's ``get_array`` keeps them.
    """
    from matplotlib.collections import Collection

    return Collection.get_array(mesh)


def _mesh(fig, mesh) -> dict:
    """A mesh: its values (``(rows, cols)``), the coordinates of its cells' corners
    (``(rows + 1, cols + 1, 2)``; for Gouraud shading its vertices, ``(rows, cols, 2)``), its
    shading and colours."""
    return {"array": _floats(mesh_array(mesh)), "coordinates": _floats(mesh.get_coordinates()),
            "shading": "gouraud" if getattr(mesh, "_shading", "flat") == "gouraud" else "flat",
            **_colours(fig, mesh)}


def _text(ax, text) -> dict:
    transform = text.get_transform()
    where = ("data" if transform is ax.transData else
             "axes" if transform is ax.transAxes else "figure")
    x, y = text.get_position()
    return {"text": text.get_text(), "x": float(x), "y": float(y), "where": where,
            "size": float(text.get_fontsize()), "rotation": float(text.get_rotation()),
            "ha": text.get_ha(), "va": text.get_va(), "color": _color(text.get_color())}


def _axes(fig, ax) -> dict:
    from matplotlib.collections import PolyQuadMesh, QuadMesh  # pcolormesh, pcolor
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FixedLocator  # ticks placed by hand (set_xticks)

    legend = ax.get_legend()
    colorbar = getattr(ax, "_colorbar", None) is not None  # its mesh is the colour bar's own
    meshes = [c for c in ax.collections if isinstance(c, (QuadMesh, PolyQuadMesh))]
    return {
        "position": [float(v) for v in ax.get_position().bounds],
        "titles": {loc: ax.get_title(loc=loc) for loc in ("center", "left", "right")},
        "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
        "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
        "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
        "xticks": _floats(ax.get_xticks()), "yticks": _floats(ax.get_yticks()),
        "xfixed": isinstance(ax.xaxis.get_major_locator(), FixedLocator),
        "yfixed": isinstance(ax.yaxis.get_major_locator(), FixedLocator),
        "xticklabels": _tick_labels(ax.get_xticklabels()),
        "yticklabels": _tick_labels(ax.get_yticklabels()),
        "aspect": ax.get_aspect() if isinstance(ax.get_aspect(), str) else float(ax.get_aspect()),
        "axison": bool(ax.axison),  # an inverted axis shows in its limits
        "lines": [_line(ax, line) for line in ax.lines][:2_000],
        "collections": [c for c in (_collection(c) for c in ax.collections) if c][:2_000],
        "images": [_image(fig, image) for image in ax.images][:100],
        "meshes": [] if colorbar else [_mesh(fig, mesh) for mesh in meshes][:100],
        "texts": [_text(ax, t) for t in ax.texts][:2_000],
        "bars": [[float(p.get_x()), float(p.get_y()), float(p.get_width()),
                  float(p.get_height()), _color(p.get_facecolor())]
                 for p in ax.patches if isinstance(p, Rectangle)][:5_000],
        "legend": [t.get_text() for t in legend.get_texts()] if legend is not None else None,
    }


def describe(fig) -> dict:
    """Plain data for everything drawn in ``fig`` (numpy arrays where there are numbers)."""
    suptitle = getattr(fig, "_suptitle", None)
    return {"size": [float(v) for v in fig.get_size_inches()], "dpi": float(fig.dpi),
            "suptitle": suptitle.get_text() if suptitle is not None else None,
            "texts": [t.get_text() for t in fig.texts][:1_000],
            "axes": [_axes(fig, ax) for ax in fig.axes][:200]}


# --------------------------------------------------------------------------- the trusted side


def _str(value, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _num(value, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else default


def _set_ticks(axis, ticks, labels) -> None:
    ticks = np.asarray(ticks, dtype=np.float64).ravel()
    if not isinstance(labels, list) or len(labels) != len(ticks):
        return
    axis.set_ticks(ticks, [_str(label[0]) for label in labels])
    for tick_label, label in zip(axis.get_ticklabels(), labels):
        tick_label.set_rotation(_num(label[1]))
        tick_label.set_fontsize(_num(label[2], 10.0))


def _rebuild_line(ax, data: dict) -> None:
    style = {"color": data.get("color"), "linestyle": _str(data.get("ls"), "-"),
             "linewidth": _num(data.get("lw"), 1.5), "marker": _str(data.get("marker"), "None"),
             "markersize": _num(data.get("ms"), 6.0), "label": _str(data.get("label")),
             "alpha": data.get("alpha") if isinstance(data.get("alpha"), float) else None}
    x = np.asarray(data.get("x", []), dtype=np.float64)
    y = np.asarray(data.get("y", []), dtype=np.float64)
    if data.get("axline") == "h" and len(y):
        ax.axhline(y[0], **style)
    elif data.get("axline") == "v" and len(x):
        ax.axvline(x[0], **style)
    elif data.get("axline") == "axes":
        ax.plot(x, y, transform=ax.transAxes, **style)
    else:
        ax.plot(x, y, **style)


def _rebuild_collection(ax, data: dict) -> None:
    from matplotlib.collections import LineCollection

    if data.get("kind") == "path":
        offsets = np.asarray(data.get("offsets", np.zeros((0, 2))), dtype=np.float64)
        sizes = np.asarray(data.get("sizes", []), dtype=np.float64)
        colors = [c for c in data.get("colors", []) if isinstance(c, str)]
        collection = ax.scatter(offsets[:, 0], offsets[:, 1],
                                s=sizes if len(sizes) in (1, len(offsets)) else None,
                                c=colors if len(colors) == len(offsets) else None,
                                label=_str(data.get("label")))
        if len(data.get("array", [])):
            collection.set_array(np.asarray(data["array"], dtype=np.float64))
    elif data.get("kind") == "lines":
        segments = [np.asarray(s, dtype=np.float64) for s in data.get("segments", [])]
        styles = []
        for style in data.get("linestyles", []):
            if isinstance(style, list) and len(style) == 2 and isinstance(style[1], list) \
                    and style[1] and all(isinstance(d, float) and d > 0 for d in style[1]):
                styles.append((_num(style[0]), tuple(style[1])))
            else:
                styles.append("solid")
        colors = [c for c in data.get("colors", []) if isinstance(c, str)]
        widths = [w for w in np.asarray(data.get("linewidths", []), dtype=np.float64).ravel()
                  if np.isfinite(w) and w >= 0]
        ax.add_collection(LineCollection(segments, label=_str(data.get("label")),
                                         linestyles=styles or "solid", colors=colors or None,
                                         linewidths=widths or None))


def _norm(data: dict):
    """The norm an image's or a mesh's description names, with its limits (finite or None)."""
    from matplotlib import colors as mcolors

    clim = data.get("clim") if isinstance(data.get("clim"), list) else [None, None]
    vmin, vmax = (float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None
                  for v in (clim + [None, None])[:2])
    norm_name = data.get("norm") if data.get("norm") in _NORMS else "Normalize"
    vcenter = data.get("vcenter")
    if norm_name == "TwoSlopeNorm" and isinstance(vcenter, float) and np.isfinite(vcenter):
        return mcolors.TwoSlopeNorm(vcenter, vmin=vmin, vmax=vmax)
    if norm_name == "LogNorm":
        return mcolors.LogNorm(vmin=vmin, vmax=vmax)
    return mcolors.Normalize(vmin=vmin, vmax=vmax)


def _colormap(data: dict):
    """The colormap a description names; a name matplotlib does not know (the learner's own
    colormap) keeps its name on a stand-in, so the tests read the name the learner gave."""
    import matplotlib

    name = _str(data.get("cmap"), "viridis")[:100]
    if name in matplotlib.colormaps:
        return matplotlib.colormaps[name]
    stand_in = matplotlib.colormaps["viridis"].copy()
    stand_in.name = name
    return stand_in


def _link_colorbar(fig, mappable, data: dict, ax, all_axes: list) -> None:
    """The colour bar the description links to ``mappable``: drawn into that axes if it is
    another axes of the figure that holds no colour bar yet."""
    index = data.get("colorbar")
    if type(index) is int and 0 <= index < len(all_axes):
        cax = all_axes[index]
        if cax is not ax and getattr(cax, "_colorbar", None) is None:
            fig.colorbar(mappable, cax=cax)


def _rebuild_image(fig, ax, data: dict, all_axes: list) -> None:
    extent = data.get("extent")
    image = ax.imshow(np.asarray(data.get("array"), dtype=np.float64),
                      cmap=_colormap(data), norm=_norm(data),
                      origin=data.get("origin") if data.get("origin") in ("upper", "lower")
                      else "upper",
                      extent=[_num(v) for v in extent] if isinstance(extent, list)
                      and len(extent) == 4 else None,
                      interpolation=_str(data.get("interpolation"), "antialiased"))
    _link_colorbar(fig, image, data, ax, all_axes)


def _mesh_values(data: dict) -> tuple[np.ndarray | None, np.ndarray, str]:
    """A mesh description's values ``(rows, cols)`` (None for colours given per cell, an RGB
    mesh, which is no heatmap), coordinates and shading, checked.

    Raises ValueError for what no real mesh has: coordinates that are not a finite
    ``(rows + 1, cols + 1, 2)`` float array (``(rows, cols, 2)`` for Gouraud shading), more
    than :data:`MAX_MESH_CELLS` cells, values that are not floats.
    """
    shading, array, points = data.get("shading"), data.get("array"), data.get("coordinates")
    if shading not in ("flat", "gouraud") or not isinstance(array, np.ndarray) \
            or not isinstance(points, np.ndarray) or array.dtype.kind != "f" \
            or points.dtype.kind != "f":
        raise ValueError("a mesh of no known form")
    extra = 1 if shading == "flat" else 0
    if points.ndim != 3 or points.shape[2] != 2 or min(points.shape[:2]) < 1 + extra:
        raise ValueError(f"a mesh whose coordinates have the shape {points.shape}")
    rows, cols = points.shape[0] - extra, points.shape[1] - extra
    if rows * cols > MAX_MESH_CELLS:
        raise ValueError(f"a mesh of {rows * cols:,} cells (at most {MAX_MESH_CELLS:,})")
    if not np.isfinite(points).all():
        raise ValueError("a mesh with coordinates that are not finite")
    values = array.astype(np.float64).reshape(rows, cols) if array.size == rows * cols else None
    return values, points.astype(np.float64), shading


def _rebuild_mesh(fig, ax, data: dict, all_axes: list) -> None:
    values, points, shading = _mesh_values(data)
    if values is None:
        return  # an RGB mesh: no heatmap, like the learner's
    mesh = ax.pcolormesh(points[..., 0], points[..., 1], values, shading=shading,
                         cmap=_colormap(data), norm=_norm(data))
    _link_colorbar(fig, mesh, data, ax, all_axes)


def _bounded_dpi(width: float, height: float, dpi: float) -> float:
    """``dpi``, lowered where ``width`` x ``height`` inches would exceed :data:`MAX_PIXELS`, or
    :data:`MAX_SIDE` pixels on one side (matplotlib refuses 2^16 before 3.10). A figure that
    fits only below :data:`MIN_DPI` is refused (ValueError): its texts could not be drawn."""
    width, height = abs(width), abs(height)
    bounds = [dpi]
    area = width * height * dpi * dpi
    if area > MAX_PIXELS:
        bounds.append(dpi * float(np.sqrt(MAX_PIXELS / area)))
    bounds += [MAX_SIDE / side for side in (width, height) if side * dpi > MAX_SIDE]
    if min(bounds) < min(dpi, MIN_DPI):
        raise ValueError(f"a figure of {width:g} x {height:g} inches, too large to draw (at most "
                         f"{MAX_SIDE / MIN_DPI:g} inches a side and "
                         f"{MAX_PIXELS / MIN_DPI ** 2:g} square inches)")
    return min(bounds)


def rebuild(data: dict):
    """A real :class:`matplotlib.figure.Figure` drawn from :func:`describe`'s data."""
    from matplotlib.figure import Figure

    size = data.get("size") or [6.4, 4.8]
    width, height = _num(size[0], 6.4), _num(size[1], 4.8)
    fig = Figure(figsize=(width, height), dpi=_bounded_dpi(width, height, _num(data.get("dpi"), 100)))
    described = [a for a in data.get("axes", []) if isinstance(a, dict)]
    positions = [[_num(v) for v in axes.get("position", [])][:4] for axes in described]
    positions = [p if len(p) == 4 else [0.1, 0.1, 0.8, 0.8] for p in positions]
    all_axes = [fig.add_axes(position) for position in positions]
    for ax, axes in zip(all_axes, described):
        for line in axes.get("lines", []):
            _rebuild_line(ax, line)
        for collection in axes.get("collections", []):
            _rebuild_collection(ax, collection)
        for image in axes.get("images", []):
            _rebuild_image(fig, ax, image, all_axes)
        for mesh in axes.get("meshes", []):
            _rebuild_mesh(fig, ax, mesh, all_axes)
        for x, y, width, height, color in axes.get("bars", []):
            ax.bar(_num(x) + _num(width) / 2, _num(height), width=_num(width), bottom=_num(y),
                   color=color)
        for text in axes.get("texts", []):
            transform = {"data": ax.transData, "axes": ax.transAxes}.get(text.get("where"),
                                                                         fig.transFigure)
            ax.text(_num(text.get("x")), _num(text.get("y")), _str(text.get("text")),
                    transform=transform, fontsize=_num(text.get("size"), 10.0),
                    rotation=_num(text.get("rotation")), ha=_str(text.get("ha"), "left"),
                    va=_str(text.get("va"), "baseline"), color=text.get("color"))
    for ax, axes, position in zip(all_axes, described, positions):
        ax.set_position(position)
        for loc, title in (axes.get("titles") or {}).items():
            if loc in ("center", "left", "right") and title:
                ax.set_title(_str(title), loc=loc)
        ax.set_xlabel(_str(axes.get("xlabel")))
        ax.set_ylabel(_str(axes.get("ylabel")))
        for name in ("xscale", "yscale"):
            if axes.get(name) in ("linear", "log", "symlog", "logit"):
                getattr(ax, f"set_{name}")(axes[name])
        if axes.get("xfixed"):
            _set_ticks(ax.xaxis, axes.get("xticks", []), axes.get("xticklabels"))
        if axes.get("yfixed"):
            _set_ticks(ax.yaxis, axes.get("yticks", []), axes.get("yticklabels"))
        xlim, ylim = axes.get("xlim") or [0, 1], axes.get("ylim") or [0, 1]
        ax.set_xlim(_num(xlim[0]), _num(xlim[1], 1.0))
        ax.set_ylim(_num(ylim[0]), _num(ylim[1], 1.0))
        aspect = axes.get("aspect")
        if aspect in ("auto", "equal") or (isinstance(aspect, float) and aspect > 0):
            ax.set_aspect(aspect)
        if not axes.get("axison", True):
            ax.set_axis_off()
        if isinstance(axes.get("legend"), list):
            handles = ax.get_legend_handles_labels()[0]
            labels = [_str(t) for t in axes["legend"]]
            if len(handles) == len(labels):
                ax.legend(handles, labels)
            else:
                ax.legend(labels)
    if isinstance(data.get("suptitle"), str):
        fig.suptitle(data["suptitle"])
    for text in data.get("texts", []):
        if isinstance(text, str) and text != data.get("suptitle"):
            fig.text(0.5, 0.5, text)
    return fig
