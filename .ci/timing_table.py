#!/usr/bin/env python3
"""The wall time of each tier of `make test`, from what .ci/timed-shell recorded, and its share:

    python3 .ci/timing_table.py TIMINGS [--reference .ci/timings.tsv]

A tier that took more than half again as long as in the reference (the committed table of a
clean clone's run) is flagged. Prints the table; exits 0 (it informs, it does not judge)."""

import argparse
import collections
import sys


def read(path):
    seconds = collections.OrderedDict()
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                target, _, ms = line.rstrip("\n").partition("\t")
                if ms.isdigit():
                    seconds[target] = seconds.get(target, 0.0) + int(ms) / 1000
    except OSError:
        pass
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timings")
    parser.add_argument("--reference")
    args = parser.parse_args(argv)
    seconds = read(args.timings)
    reference = read(args.reference) if args.reference else {}
    total = sum(seconds.values()) or 1.0
    print(f"{'tier (make target)':<24}{'time':>10}{'share':>8}  vs reference")
    for target, took in sorted(seconds.items(), key=lambda item: -item[1]):
        before = reference.get(target)
        note = ""
        if before:
            note = f"{before / 60:6.1f} min"
            if took > 1.5 * before and took - before > 30:
                note += "  GREW BY MORE THAN HALF"
        print(f"{target:<24}{took / 60:>8.1f} m{took / total * 100:>7.1f}%  {note}")
    print(f"{'total':<24}{total / 60:>8.1f} m")
    return 0


if __name__ == "__main__":
    sys.exit(main())
