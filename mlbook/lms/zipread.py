"""A zip from outside read safely: nothing is extracted by its own name, sizes are counted on
the bytes actually decompressed.

An LMS download is hostile input (students choose the file names inside it; a zip can be
crafted by anyone who hands one to a TA). ``SafeZip`` opens it and refuses the whole archive,
before anything is written anywhere, when its structure is an attack or a mistake:
- more than ``max_entries`` entries, or a declared total over ``max_total`` bytes;
- an entry name that is absolute (``/x``, ``\\x``, ``C:x``), climbs (a ``..`` part, ``/`` or
  ``\\`` separated), holds a NUL or another control character, or appears twice;
- a symbolic link, or any entry that is neither a file nor a folder (Unix mode in the entry);
- an encrypted entry, or an archive ``zipfile`` cannot read.
Names are read as their writer meant them (``entry_name``): an entry without the UTF-8 flag is
CP437 by the zip standard, but Moodle and most tools write UTF-8 there without saying so, which
``zipfile`` turns into ``no├½l``; such a name that is valid UTF-8 is taken as UTF-8. Every name is
then NFC-normalised, so a name typed on macOS (NFD) and one typed elsewhere compare equal.
Each file is then read through ``read``, which stops at ``max_file`` bytes of *decompressed*
output (a header may lie about the size) and counts every byte against ``max_total`` for the
whole archive (``BadFile`` for one file: the caller lists that file and goes on; ``Refused``
when the archive's total runs over).
"""

from __future__ import annotations

import datetime as dt
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 5000
MAX_TOTAL = 1 << 30  # 1 GiB decompressed for one download
CHUNK = 1 << 20


class Refused(Exception):
    """The whole archive is refused; the message says why."""


class BadFile(Exception):
    """One file cannot be taken: over the per-file cap once decompressed, or unreadable."""


@dataclass(frozen=True)
class Member:
    name: str  # as stored (``/`` separated)
    parts: tuple[str, ...]  # the folders and the file name
    size: int  # declared, uncompressed
    modified: dt.datetime  # the entry's time (a zip stores local time, no zone)
    info: zipfile.ZipInfo

    @property
    def filename(self) -> str:
        return self.parts[-1]


def shown(name: str, limit: int = 100) -> str:
    """A name from the archive as it may appear in a message: escaped, cut short."""
    text = name.encode("unicode_escape").decode("ascii") if any(unicodedata.category(c)[0] == "C" for c in name) else name
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name as its writer meant it (see the module docstring), NFC."""
    name = info.filename
    if not info.flag_bits & 0x800:  # not marked UTF-8: zipfile decoded the bytes as CP437
        try:
            name = name.encode("cp437").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass  # really CP437 (or not UTF-8 at all): keep zipfile's reading
    return unicodedata.normalize("NFC", name)


class SafeZip:
    def __init__(self, path: Path, *, max_file: int, max_total: int = MAX_TOTAL, max_entries: int = MAX_ENTRIES):
        self.path, self.max_file, self.max_total = path, max_file, max_total
        self.read_bytes = 0
        try:
            self._zip = zipfile.ZipFile(path)
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise Refused(f"{path.name} is not a readable zip archive ({exc})") from None
        if len(infos) > max_entries:
            self._zip.close()
            raise Refused(f"{path.name} holds {len(infos)} entries, more than the {max_entries} a download may hold")
        declared = sum(i.file_size for i in infos)
        if declared > max_total:
            self._zip.close()
            raise Refused(f"{path.name} would decompress to {declared} bytes, over the {max_total}-byte cap "
                          "for one download (a zip bomb, or the wrong file)")
        self.members: list[Member] = []
        seen: set[str] = set()
        try:
            for info in infos:
                member = self._member(info)
                if member is None:
                    continue
                key = "/".join(member.parts)
                if key in seen:
                    raise Refused(f"{path.name}: the entry {shown(info.filename)!r} appears twice")
                seen.add(key)
                self.members.append(member)
        except Refused:
            self._zip.close()
            raise

    def _member(self, info: zipfile.ZipInfo) -> Member | None:
        name = entry_name(info)
        where = f"{self.path.name}: the entry {shown(name)!r}"
        if any(unicodedata.category(c) == "Cc" for c in name):
            raise Refused(f"{where} has a control character in its name")
        if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
            raise Refused(f"{where} is an absolute path; nothing in a download may name a place outside it")
        parts = tuple(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))
        if ".." in parts:
            raise Refused(f"{where} climbs out of the archive (`..`)")
        mode = info.external_attr >> 16
        if info.create_system == 3 and mode:  # Unix: the file type is in the entry
            if stat.S_ISLNK(mode):
                raise Refused(f"{where} is a symbolic link; a download holds files only")
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise Refused(f"{where} is a special file (mode {oct(stat.S_IFMT(mode))}), not a file")
        if info.flag_bits & 0x1:
            raise Refused(f"{where} is encrypted")
        if info.is_dir() or not parts:
            return None
        try:
            modified = dt.datetime(*info.date_time)
        except ValueError:
            modified = dt.datetime(1980, 1, 1)
        return Member(name, parts, info.file_size, modified, info)

    def read(self, member: Member) -> bytes:
        """The member's bytes; ``BadFile`` past ``max_file``, ``Refused`` past the archive's total."""
        if member.size > self.max_file:
            raise BadFile(f"{member.size} bytes, over the {self.max_file}-byte cap for a submitted file")
        chunks, size = [], 0
        try:
            with self._zip.open(member.info) as handle:
                while chunk := handle.read(CHUNK):
                    size += len(chunk)
                    self.read_bytes += len(chunk)
                    if self.read_bytes > self.max_total:
                        raise Refused(f"{self.path.name} decompresses to more than the {self.max_total}-byte cap for "
                                      "one download (its headers understate the sizes: a zip bomb)")
                    if size > self.max_file:
                        raise BadFile(f"more than the {self.max_file}-byte cap for a submitted file once "
                                       f"decompressed (its header said {member.size})")
                    chunks.append(chunk)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
            raise BadFile(f"unreadable in the archive ({exc})") from None
        return b"".join(chunks)

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> "SafeZip":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
