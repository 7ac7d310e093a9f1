"""The hand-back zip: every student's feedback page in the one upload each LMS takes.

Written by ``mlbook feedback LAB --lms canvas|moodle`` to ``exports/handback/<lab>-<lms>.zip``,
one page per student collected from that LMS's download (``submitted/.collected/<lab>.json``
keeps the names the download gave). Each entry is the download's own prefix followed by
``<lab>-feedback.html`` (``LmsFormat.handback_name``; each LMS's module of ``mlbook.lms.formats``
says how its upload reads it):

- **Moodle** (Assignment > View all submissions > Grading action "Upload multiple feedback files
  in a zip"; ``assignfeedback_file`` ``importziplib.php``): ``<Full Name>_<participant id>_
  assignsubmission_file_<lab>-feedback.html``. Moodle splits the name on ``_``, finds the
  participant by the second part and the submission plugin by the third and fourth, and
  attaches the file to that student's feedback.
- **Canvas** (Assignment > "Re-Upload Submissions"; canvas-lms ``Assignment#generate_comments_from_files``):
  ``<name>_[LATE_]<user id>_<attachment id>_<lab>-feedback.html``. Canvas reads the first two
  all-digit ``_`` parts as the user id and the id of a file of that user's submission (the
  notebook that was collected), and adds the page to the submission as a comment attachment.
  Canvas has no separate feedback-file upload; this re-upload is what Canvas offers for
  returning files in bulk. Grades go through ``exports/canvas.csv``.

A student with a feedback page but no entry from that LMS's download (placed by hand, or
collected from another LMS) is listed as skipped, with the reason; nobody is dropped silently.
"""

from __future__ import annotations

import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.course import Course
from mlbook.errors import MlbookError
from mlbook.files import replacing
from mlbook.lms import formats
from mlbook.lms.collect import read_manifest


@dataclass
class Handback:
    path: Path
    files: dict[str, str] = field(default_factory=dict)  # student -> entry in the zip
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (student, reason)


def write_handback(course: Course, lab: str, lms: str, students: list[str] | None = None,
                   path: Path | None = None) -> Handback:
    fmt = formats.named(lms, "handbacks")
    lms = fmt.name
    manifest = read_manifest(course, lab)["students"]
    path = path or course.exports_dir / "handback" / f"{lab}-{lms}.zip"
    result = Handback(path)
    students = students if students is not None else sorted(set(course.students(lab)) | set(manifest))
    pages: dict[str, Path] = {}
    for student in students:
        page = course.feedback(student, lab)
        entry = manifest.get(student)
        if not page.is_file():
            result.skipped.append((student, "no feedback page (run `mlbook feedback` after grading)"))
        elif entry is None:
            result.skipped.append((student, "not collected from an LMS download: hand the page back by hand"))
        elif entry.get("format") != lms or not entry.get("prefix"):
            result.skipped.append((student, f"collected from a {entry.get('format')} download, not {lms}"))
        else:
            result.files[student] = unicodedata.normalize("NFC", fmt.handback_name(entry["prefix"], lab))
            pages[student] = page
    with replacing(path) as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for student in sorted(result.files):
                archive.writestr(result.files[student], pages[student].read_bytes())
    return result
