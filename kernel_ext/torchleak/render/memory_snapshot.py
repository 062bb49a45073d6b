"""A report as PyTorch's memory viewer reads it: the snapshot structure of
``torch.cuda.memory._snapshot()`` (``segments`` and ``device_traces``), pickled by
``report.save("x.pickle")`` for https://pytorch.org/memory_viz and ``torch.cuda._memory_viz``.

What it holds is what a torchleak report knows: the blocks alive when the report was built,
each with its allocation stack under a frame that names its holder and verdict, and their
allocations in run order as each device's trace (so the viewer's timeline shows the leak
accumulating). Freed blocks and the allocator's cached
segments are not in a report: every block is its own segment, exactly its size. A finding that
had more live blocks than it lists (``live_blocks_unlisted``) gets one more block of their
total bytes, whose innermost frame says so.
"""

# The file name of the frames torchleak adds: a block's label, a finding's unlisted rest.
_TORCHLEAK_FILE = "<torchleak>"
# The viewer (memory_viz) reads pickles up to protocol 4; Python 3.14 writes 5 by default.
PICKLE_PROTOCOL = 4


def _device_indices(findings):
    """The viewer's device index of each device name: an accelerator's own index (the next
    free one when two kinds share it); the CPU, which has none, the one after the
    accelerators', as torch's own _memory_viz._profile_to_snapshot does."""
    names = sorted({f.get("device") or "cpu" for f in findings})
    indices, used = {}, set()
    for name in names:
        kind, _, index = name.partition(":")
        # The core refuses any other index at load (report_json.cpp, deviceAt); a Report made
        # from a dict skipped the load, and the traces are a list as long as the highest index.
        if kind != "cpu" and index.isascii() and index.isdigit() and int(index) <= 127 and int(index) not in used:
            indices[name] = int(index)
            used.add(int(index))
    for name in names:
        if name not in indices and name != "cpu":
            indices[name] = max(used, default=-1) + 1
            used.add(indices[name])
    if "cpu" in names:
        indices["cpu"] = max(used, default=-1) + 1
    return indices


def _frames(finding):
    """The finding's stack, innermost first as the viewer reads it, under one more frame that
    says what torchleak knows of the block (the core's `block_label`: "torchleak: held by
    losses (leak)"): the viewer shows it at the tip of every block's stack."""
    frames = [
        {"filename": fr.get("file") or "", "line": int(fr.get("line") or 0), "name": fr.get("function") or ""}
        for fr in finding.get("stack") or []
    ]
    label = finding.get("block_label")
    if label:
        frames.insert(0, {"filename": _TORCHLEAK_FILE, "line": 0, "name": label})
    return frames


def _segment_of_one_block(device, address, size, frames):
    block = {"address": address, "size": size, "requested_size": size, "state": "active_allocated", "frames": frames}
    segment = {
        "device": device,
        "address": address,
        "total_size": size,
        "allocated_size": size,
        "active_size": size,
        "requested_size": size,
        "stream": 0,
        "segment_type": "large" if size >= (1 << 20) else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": [block],
    }
    return segment


def render(data):
    """The snapshot dict of a report dict (pickle it for the viewer)."""
    findings = data.get("findings") or []
    indices = _device_indices(findings)
    listed = []  # (sequence, device, address, size, frames)
    unlisted = []  # (device, size, frames) of the findings' uncounted rest
    for finding in findings:
        device = indices[finding.get("device") or "cpu"]
        frames = _frames(finding)
        for b in finding.get("live_blocks") or []:
            listed.append((b["sequence"], device, b["address"], b["size"], frames))
        rest = finding.get("live_blocks_unlisted")
        if rest and rest.get("bytes"):
            marker = {
                "filename": _TORCHLEAK_FILE,
                "line": 0,
                "name": f"{rest['count']:,} more live blocks of this site, not listed",
            }
            unlisted.append((device, rest["bytes"], [marker] + frames))
    listed.sort(key=lambda entry: entry[0])
    segments = []
    traces = [[] for _ in range(max(indices.values(), default=-1) + 1)]
    for _, device, address, size, frames in listed:
        segments.append(_segment_of_one_block(device, address, size, frames))
        traces[device].append({"action": "alloc", "addr": address, "size": size, "stream": 0, "frames": frames})
    # The unlisted rest sits past every real address, each at an address of its own.
    address = max((a + s for _, _, a, s, _ in listed), default=0)
    for device, size, frames in unlisted:
        address = (address + 0xFFF) & ~0xFFF
        segments.append(_segment_of_one_block(device, address, size, frames))
        address += size
    segments.sort(key=lambda seg: (seg["device"], seg["address"]))
    return {
        "segments": segments,
        "device_traces": traces,
        "torchleak": {
            "devices": {str(i): name for name, i in indices.items()},
            "iterations": data.get("iterations", 0),
        },
    }
