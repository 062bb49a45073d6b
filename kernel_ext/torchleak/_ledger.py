"""The %leakwatch ledger: after a cell run, one line of what the cell changed, as net bytes per
holder (the names the user wrote): what it left alive and what it freed, so a fix can be
confirmed (the cell that clears a list shows the bytes it gave back). A cell that replaced what
it holds (``y = ...`` re-run) changed nothing and says nothing."""

import sys

from .render.format import format_bytes

HOLDERS_SHOWN = 5
# Roles the ledger names apart: what a cell leaves as model state (memory by role, the core's
# `findings[].role`), so a cell that ran backward or the optimizer's step says so.
MODEL_STATE_ROLES = ("parameters", "gradients", "optimizer_state")


class CellLedger:
    """Remembers, per site, the holders its growth had: what shrinks has no path any more (it is
    gone), and is credited to the holder it had when it grew."""

    def __init__(self):
        self._holders = {}

    def forget(self):
        self._holders = {}

    def line(self, report, cell, freed, threshold, lookup=None):
        """The ledger line for cell run `cell`, or None when it changed less than `threshold`
        bytes. `report` covers the last iteration's growth (None when the cell only freed,
        `freed` bytes by the recorder's count). `lookup(name)`: the user's object a holder's
        name is (`Out[13]`, `h`), or None, to say when what it keeps is a tensor's graph."""
        net = {}
        as_role = {}
        for f in report.findings if report is not None else []:
            series = f.series or []
            delta = series[-1] - (series[-2] if len(series) > 1 else 0) if series else 0
            if delta == 0:
                continue
            name = _holder(f)
            key = _site(f)
            if name is not None:
                self._holders.setdefault(key, set()).add(name)
            elif len(self._holders.get(key, ())) == 1:
                (name,) = self._holders[key]
            if f.get("retention") == "cycle":
                continue  # garbage the next collection frees, not something the cell keeps
            net[name or ""] = net.get(name or "", 0) + delta
            if delta > 0 and f.get("role") in MODEL_STATE_ROLES:
                as_role[f["role"]] = as_role.get(f["role"], 0) + delta
        if report is None:
            net[""] = -freed
        left = sorted(((h or "<unknown>", b) for h, b in net.items() if b >= threshold), key=lambda kv: -kv[1])
        gave = sorted(((h, -b) for h, b in net.items() if h and -b >= threshold), key=lambda kv: -kv[1])
        released = -sum(b for b in net.values() if b < 0)
        parts = []
        if left:
            holders = ", ".join(
                f"{holder} {format_bytes(b)}{_graph_note(lookup, holder, b)}" for holder, b in left[:HOLDERS_SHOWN]
            )
            parts.append(f"left {format_bytes(sum(b for _, b in left))} alive: {holders}")
            roles = sorted(
                ((_role_label(report, r), b) for r, b in as_role.items() if b >= threshold), key=lambda kv: -kv[1]
            )
            if roles:
                parts[-1] += " (of which " + ", ".join(f"{label} {format_bytes(b)}" for label, b in roles) + ")"
        if released >= threshold:
            named = ", ".join(f"{holder} {format_bytes(b)}" for holder, b in gave[:HOLDERS_SHOWN])
            parts.append(f"freed {format_bytes(released)}" + (f": {named}" if named else ""))
        if not parts:
            return None
        text = f"torchleak: In [{cell}] " + "; ".join(parts)
        leaks = [f for f in report.leaks if f.site.get("cell") == cell] if report is not None else []
        if leaks:
            text += f" ({len(leaks)} leak(s): %leakreport for details)"
        return text


def _graph_note(lookup, holder, held):
    """ " with its autograd graph" when the holder is a tensor that keeps more than its own bytes
    through its grad_fn: `Out[13] 19.1 MiB` under a displayed [16, 64] tensor did not say that
    the 19 MiB is the graph its output keeps. Only a plain torch.Tensor is asked (a subclass's
    attributes may run its __torch_function__: user code)."""
    torch = sys.modules.get("torch")
    obj = lookup(holder) if lookup is not None else None
    if torch is None or type(obj) is not torch.Tensor:
        return ""
    try:
        # Past its storage: a view's base is its storage, not its graph.
        keeps_graph = obj.grad_fn is not None and held > obj.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - a tensor being torn down: say nothing
        return ""
    return " with its autograd graph" if keeps_graph else ""


def _role_label(report, role):
    """The core's words for a role (`devices[].roles[].label`)."""
    for device in report.to_dict().get("devices") or []:
        for entry in device.get("roles") or []:
            if entry.get("role") == role:
                return entry.get("label") or role
    return role


def _holder(finding):
    """Who keeps a finding's bytes, by the name the user wrote: its growing container, else its
    path's root (``y``, ``model``, ``Out[7]``); None when no path was found."""
    holder = (finding.get("holder") or {}).get("path_text")
    if holder:
        return holder
    path = finding.get("path") or []
    return path[0]["label"] if path else None


def _site(finding):
    site = finding.get("site") or {}
    return (site.get("file"), site.get("line"), site.get("function"), finding.get("device"))
