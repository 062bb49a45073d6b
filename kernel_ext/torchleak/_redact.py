"""Report.redacted(): a report that can travel (a CI artefact, an issue, a chat) without what it
says about the code and the data behind it.

Withheld: tensor shapes and dtypes, source lines (notebook cell text included), absolute paths
(a file under the project becomes relative to it, one under an installed library relative to
its site-packages, any other a hash), string, tuple and torch.Size dictionary keys (a hash
each), and in text that came from outside torchleak (an exception's message, a failed rank's
note) every path and quoted string. Kept: verdicts, rates, sizes, roles, line numbers, function
names and the retaining paths' structure, so the redacted report still says where, why and
whether.

Every string field of a report is declared once, in the core (FIELDS, from
core/src/redaction_fields.cpp), with what redaction does to it;
tests/python/test_redact.py walks reports with every section and fails on a string field that
FIELDS does not name, so a new field cannot slip through unredacted. The sentences the core
writes from the fields (site texts, cause texts, the headline) are written again by the core
from the redacted fields.
"""

import copy
import hashlib
import json
import os
import re
import site
import sysconfig

from . import _core

# Where installed code lives: a path under one of these is public (torch/nn/modules/module.py).
_LIBRARY_DIRS = sorted(
    {
        os.path.abspath(p)
        for p in [
            *site.getsitepackages(),
            site.getusersitepackages(),
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
        ]
        if p
    },
    key=len,
    reverse=True,
)
# A literal key as the core labels it: ['k'] or ["k"] (a key that is an object reads otherwise);
# a tuple key, ('en', 512), or a torch.Size key: the strings and shapes they may hold go too.
_LITERAL_KEY = re.compile(r"""^\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\(.*\)|torch\.Size\(\[.*\]\))\]$""")
# A shape written into a sentence: "the 64×10 tensors", "the 512-element tensors".
_SHAPE_IN_TEXT = re.compile(r"\b\d+(?:(?:\u00d7\d+)+\b|-element\b)")
# In text from outside torchleak: an absolute path (POSIX, or a drive's), a quoted string, a
# shape as torch prints one ([41, 53], torch.Size([41, 53])).
_PATH_IN_FREE_TEXT = re.compile(r"""(?<![^\s'"(=\[,])(?:/|[A-Za-z]:\\)[^\s'"(),;]+""")
_QUOTED_IN_FREE_TEXT = re.compile(r"""'[^'\n]*'|"[^"\n]*\"""")
_SHAPE_IN_FREE_TEXT = re.compile(r"\[\d+(?:,\s*\d+)+\]")

# What redaction does to a string field:
KEEP = "kept"  # a word of the schema (verdict, role, device), a function or type name, a version
FILE = "file"  # a path: relative to the project or a library directory, else a hash
DROP = "dropped"  # a source line, a fix written from one, a dtype
KEY = "key"  # a path step's label: a string key becomes a hash
SENTENCE = "sentence"  # torchleak's words quoting the fields: each withheld string replaced
FREE_TEXT = "free text"  # words from outside torchleak: its paths, quoted strings, shapes replaced too
WRITTEN_AGAIN = "written again"  # a display string the core writes again from the redacted fields

# Every string field of a torchleak.report/1 document, by its place ("[]": each item of a list),
# with its rule: declared by the core beside the schema's writer (redaction_fields.cpp).
FIELDS = dict(_core.REDACTION_FIELDS)


def string_fields(data, place=""):
    """(place, owner, key) of every string field of `data`, places spelled as FIELDS spells them."""
    if isinstance(data, dict):
        for key, value in data.items():
            inner = f"{place}.{key}" if place else key
            if isinstance(value, str):
                yield inner, data, key
            else:
                yield from string_fields(value, inner)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, str):
                yield f"{place}[]", data, i
            else:
                yield from string_fields(value, f"{place}[]")


def _digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _project_or_none(project):
    """The directory whose files are shown relative to it, or None when that would show a path
    anyway: the file system's root, the home directory or one above it (/home), as a run
    started by cron, systemd or a container's WORKDIR has."""
    project = os.path.abspath(project)
    home = os.path.abspath(os.path.expanduser("~"))
    if os.path.dirname(project) == project or project == home or home.startswith(project.rstrip(os.sep) + os.sep):
        return None
    return project


class _Redaction:
    def __init__(self, project):
        self.bases = [b for b in (_project_or_none(project), *_LIBRARY_DIRS) if b]
        self.replaced = {}  # withheld string -> its stand-in, for the stored sentences

    def file(self, path):
        if not isinstance(path, str) or not (os.path.isabs(path) or re.match(r"[A-Za-z]:\\", path)):
            return path
        for base in self.bases:
            if path.startswith(base.rstrip(os.sep) + os.sep):
                stand_in = os.path.relpath(path, base)
                break
        else:
            stand_in = f"<file {_digest(path)}>"
        self.replaced[path] = stand_in
        return stand_in

    def key(self, label):
        stand_in = f"[<key {_digest(label)}>]"
        self.replaced[label] = stand_in
        return stand_in

    def sentences(self):
        """The rewrite of a stored sentence, once every withheld string is known: one pass that
        puts each one's stand-in in its place (the longest first where two overlap) and writes
        shapes as <shape>."""
        if not self.replaced:
            pattern = None
        else:
            pattern = re.compile("|".join(re.escape(w) for w in sorted(self.replaced, key=len, reverse=True)))

        def sentence(text):
            if pattern is not None:
                text = pattern.sub(lambda m: self.replaced[m.group()], text)
            return _SHAPE_IN_TEXT.sub("<shape>", text)

        return sentence

    def free_text(self, text, sentence):
        """Words from outside torchleak: the known withheld strings, then any other path, quoted
        string or shape in them."""
        text = sentence(text)
        text = _PATH_IN_FREE_TEXT.sub(lambda m: self.file(m.group()), text)
        text = _QUOTED_IN_FREE_TEXT.sub(lambda m: f"{m.group()[0]}<text {_digest(m.group())}>{m.group()[0]}", text)
        return _SHAPE_IN_FREE_TEXT.sub("<shape>", text)


def redact(data, project=None):
    """A redacted copy of a report's JSON data (the dict Report holds)."""
    out = copy.deepcopy(data)
    r = _Redaction(project or os.getcwd())
    for finding in out.get("findings", []):  # shapes are lists: not string fields
        finding["shape"] = None
        for step in finding.get("path", []):
            if isinstance(step.get("tensor"), dict):
                step["tensor"].pop("shape", None)
    fields = list(string_fields(out))
    # First the fields that withhold a string (so its stand-in is known), then the sentences
    # that may quote it; a field FIELDS does not know is taken for words from outside.
    dropped = []
    for place, owner, key in fields:
        rule = FIELDS.get(place, FREE_TEXT)
        if rule == FILE:
            owner[key] = r.file(owner[key])
        elif rule == KEY and owner.get("kind") == "key" and _LITERAL_KEY.match(owner[key]):
            owner[key] = r.key(owner[key])
        elif rule == DROP:
            dropped.append((place, owner, key))
    sentence = r.sentences()
    for place, owner, key in fields:
        rule = FIELDS.get(place, FREE_TEXT)
        if rule in (SENTENCE, WRITTEN_AGAIN) or (rule == KEY and not owner[key].startswith("[<key ")):
            owner[key] = sentence(owner[key])
        elif rule == FREE_TEXT:
            owner[key] = r.free_text(owner[key], sentence)
    for place, owner, key in dropped:
        if place == "findings[].dtype":
            owner[key] = None  # in the schema, null when unknown
        else:
            owner.pop(key, None)
    # The core writes its sentences again from the redacted fields and checks the result.
    return json.loads(_core.normalize_report(json.dumps(out)))
