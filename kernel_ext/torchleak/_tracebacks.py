"""Tracebacks as the user's code raised them: the frames of torchleak's own machinery that ran
it (the CLI's exec, a magic's loop) are left out, as if the code had failed on its own."""


def from_code(tb, code):
    """The traceback from the first entry that runs `code` (or all of it, when none does)."""
    entry = tb
    while entry is not None and entry.tb_frame.f_code is not code:
        entry = entry.tb_next
    return entry if entry is not None else tb
