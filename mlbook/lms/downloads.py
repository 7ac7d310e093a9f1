"""Bulk downloads written as Canvas and Moodle write them (``formats`` has how each names them),
for ``make demo`` and the tests: a class's files named the LMS's way, zipped with entry times."""

from __future__ import annotations

import datetime as dt
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlbook.files import replacing


@dataclass(frozen=True)
class Upload:
    name: str  # the entry's path in the zip
    data: bytes
    when: dt.datetime  # the entry's time, as the zip stores it (local, no zone)


def canvas_name(sortable_name: str, user_id: int, attachment_id: int, filename: str, late: bool = False) -> str:
    """``<name>_[LATE_]<user id>_<attachment id>_<file>``, the name as canvas-lms ``ContentZipper``
    builds it: the sortable name lowercased, non-word characters removed, ``_<digits>_`` collapsed."""
    name = re.sub(r"_(\d+)_", r"\1", sortable_name)
    name = re.sub(r"[^\w]", "", name.lower())
    stem = "_".join(part for part in (name, "LATE" if late else "", str(user_id)) if part)
    display = re.sub(r'[\x00/\\:*?"<>|]+', "_", filename)
    return f"{stem}_{attachment_id}_{display}"


def moodle_name(full_name: str, participant_id: int, filename: str, folders: bool = True) -> str:
    """``<Full Name>_<participant id>_assignsubmission_file_/<file>`` (folders, Moodle's default)
    or ``..._assignsubmission_file_<file>`` (flat)."""
    prefix = f"{full_name.replace('_', ' ')}_{participant_id}_assignsubmission_file_"
    return f"{prefix}/{filename}" if folders else f"{prefix}{filename}"


def write_zip(path: Path, uploads: list[Upload]) -> Path:
    with replacing(path) as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for upload in uploads:
                info = zipfile.ZipInfo(upload.name, date_time=upload.when.timetuple()[:6])
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, upload.data)
    return path
