"""The names a mistyped one was most likely meant to be, for "did you mean ...?" in an error.

difflib's ratio (get_close_matches, cutoff 0.6) counts the characters two names share, and names built from the same
parts share most of theirs whatever else differs: `mars-north1` was "did you mean asia-northeast1?" (0.69), and
`mars-standard` "n4-standard-8, n4-standard-4 or n4-standard-2". A typo is a few keystrokes: here a name is near
when it is that many edits away (a character added, left out, changed, or two swapped), and no other is nearer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_SEPARATORS = re.compile(r"[-_.\s]")


def _folded(name: str) -> str:
    # `US-CENTRAL1`, `europe-west-4`, `us central1`, `n1_standard_8`: the case and the separators are not the typo
    return _SEPARATORS.sub("", name.strip().lower())


def edits(a: str, b: str) -> int:
    """How many single-character insertions, deletions, substitutions or swaps of neighbours turn `a` into `b`
    (the optimal string alignment distance)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def near(value: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices `value` is a typo of, nearest first (at most `n`; none when more than `n` are equally near, which
    says nothing of which was meant). Case and separators aside, one edit is allowed in a name of up to 7 characters,
    two in a longer one: `us-centrl1`, `us-cental` and `us-central1-a` are us-central1; `eu-west1` (two edits in
    seven) is not us-west1."""
    folded = _folded(value)
    if not folded:
        return []
    allowed = 1 if len(folded) < 8 else 2
    scored = sorted((edits(folded, _folded(c)), c) for c in choices)
    if not scored or scored[0][0] > allowed:
        return []
    best = [c for d, c in scored if d == scored[0][0]]
    return best if len(best) <= n else []
