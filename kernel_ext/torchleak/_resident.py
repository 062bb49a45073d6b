"""The process's resident set at each boundary (Linux: /proc/self/statm), for the core's check
that memory outside tensors is not growing unseen (resident_memory.h).

Read with one pread on a descriptor opened once per tracker: 1.1 to 1.3 µs a boundary on this
machine (three rounds of 100,000 notes), which run watch's 1% budget for a 10 ms step can
spend. Elsewhere (no /proc) nothing is sampled and the
report says nothing of it."""

import os

# Enough points for a trend over any run; past it every second sample goes (the first stays).
MAX_SAMPLES = 1024


class ResidentSampler:
    def __init__(self):
        self.samples = []  # (point, bytes): point as the report's series_iterations count them
        self._fd = None
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            self.close()

    def note(self, point):
        """Samples the resident set for the boundary `point`; never raises."""
        if self._fd is None:
            return
        try:
            resident_pages = int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            self.close()
            return
        if len(self.samples) >= MAX_SAMPLES:
            self.samples = self.samples[:1] + self.samples[2::2]
        self.samples.append((point, resident_pages * self._page))

    def close(self):
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
