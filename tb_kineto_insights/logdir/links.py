"""Symlinks in a local log directory: which are followed, under which root.

By default a symlink is read only when it leads to a file inside the log directory; a
linked folder is not entered (it could point anywhere, a loop included), and a link that
leaves the log directory is named among the skipped paths. Collecting runs by symlink
is how people build comparison folders, so following them is a setting: the folders
named by ``--kineto_insights_follow_symlinks`` or ``$KINETO_INSIGHTS_FOLLOW_SYMLINKS``
(paths separated by ``os.pathsep``, ``:`` on POSIX) are *allowed roots* beside the log
directory. A symlinked folder whose target lies in one of them is entered (two links to
one run folder list it twice, under each link's name; a link back to a folder on its
own way is a loop, not entered), a symlinked file whose target lies in one is read, and a
link that leaves every allowed root is still refused and named. The root a file was
found under is the one it must still lie in when it is opened (``trace/confine.py``): a
link swapped afterwards is refused then too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FOLLOW_SYMLINKS_ENV",
    "LinkPolicy",
    "follow_roots",
]

FOLLOW_SYMLINKS_ENV = "KINETO_INSIGHTS_FOLLOW_SYMLINKS"
#: What a refusal says about the setting, so that the way to follow a link is in view.
_HINT = f" (to follow it: {FOLLOW_SYMLINKS_ENV}, or --kineto_insights_follow_symlinks)"


def follow_roots(
    value: str | Sequence[str] | None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The allowed roots besides the log directory: ``value`` (a flag's text, paths
    separated by ``os.pathsep``, or a list of paths), else
    ``$KINETO_INSIGHTS_FOLLOW_SYMLINKS``; each as its real path, empty entries left out.
    ``()``: links are not followed."""
    if value is None:
        value = (os.environ if environ is None else environ).get(FOLLOW_SYMLINKS_ENV, "")
    parts = value.split(os.pathsep) if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(os.path.realpath(p) for p in (p.strip() for p in parts) if p))


def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False


@dataclass(frozen=True)
class LinkPolicy:
    """How the listing of the log directory whose real path is ``root`` treats links:
    ``follow`` holds the other allowed roots (module docstring; empty: links stay inside
    ``root``)."""

    root: str
    follow: tuple[str, ...] = ()

    def _where(self) -> str:
        return (
            "the log directory and every folder to follow" if self.follow else ("the log directory")
        )

    def root_of(self, target: str) -> str | None:
        """The allowed root that holds the real path ``target`` (the log directory
        first), or None when it leaves every one."""
        for allowed in (self.root, *self.follow):
            if _inside(allowed, target):
                return allowed
        return None

    def enters(self, target: str) -> str | None:
        """For a symlinked folder whose real path is ``target``: the root to list it
        under when it is to be entered (following is on, the target lies in an allowed
        root and not in the log directory, which is listed anyway), else None."""
        if not self.follow or _inside(self.root, target):
            return None
        return self.root_of(target)

    @staticmethod
    def loops(target: str, link_folder: str, chain: Sequence[str]) -> bool:
        """Whether entering the linked folder ``target`` (a real path), found in the
        folder ``link_folder`` on the way through the real folders ``chain``, would list
        a folder again on that way: it holds the link itself, or it is (or holds) a
        folder already entered on the chain."""
        here = os.path.realpath(link_folder)
        return _inside(target, here) or any(_inside(target, c) for c in chain)

    def refused_folder(self, target: str) -> str | None:
        """Why a symlinked folder whose real path is ``target`` is skipped with a word
        (it leaves every allowed root), or None (entered, or inside the log directory and
        listed there)."""
        if self.root_of(target) is not None:
            return None
        return f"a symlink to the folder {target} outside {self._where()}, not entered" + (
            "" if self.follow else _HINT
        )

    def refused_file(self, target: str) -> str | None:
        """Why a symlinked file (named like a trace) whose real path is ``target`` is not
        read, or None when it is."""
        if not os.path.lexists(target):
            return "a symlink to a missing file, not read"
        if self.root_of(target) is None:
            return f"a symlink to a file outside {self._where()}, not read" + (
                "" if self.follow else _HINT
            )
        if not os.path.isfile(target):
            return "a symlink to something that is not a file, not read"
        return None
